// RoPE frequency scaling of long-context checkpoints, as per-pair frequency divisors
// (LlamaConfig::rope_freq_factors: pair i rotates by pos · theta^(−2i/head_dim) / factor[i]).
//
//   * Llama 3 (HF rope_scaling {rope_type: llama3, factor, low_freq_factor, high_freq_factor,
//     original_max_position_embeddings}): wavelength λ_i = 2π·theta^(2i/head_dim); divisor 1
//     where λ_i < original/high_freq_factor, `factor` where λ_i > original/low_freq_factor, and
//     between them 1 / ((1 − s)/factor + s) with s = (original/λ_i − low) / (high − low) — what
//     transformers' _compute_llama3_parameters does to inv_freq and what llama.cpp's converter
//     writes into GGUF's rope_freqs.weight.
//   * Linear (rope_type linear, or GGUF rope.scaling.type linear): every divisor = factor.
//   * YaRN (rope_type yarn, GGUF rope.scaling.type yarn), as ggml's rope applies it
//     (ggml-cpu ops.cpp rope_yarn, ggml.c ggml_rope_yarn_corr_dims): with s = 1/factor, the
//     correction dims lo = max(0, floor(d(beta_fast))), hi = min(head_dim − 1, ceil(d(beta_slow)))
//     where d(β) = head_dim · ln(original / (2π·β)) / (2 ln theta), and per pair
//     r_i = (1 − clamp((i − lo) / max(0.001, hi − lo), 0, 1)) · ext_factor, the angle is
//     θ_extrap · (s·(1 − r_i) + r_i): divisor 1 / (s·(1 − r_i) + r_i). cos and sin are both
//     multiplied by mscale = attn_factor · (1 + 0.1 ln factor) (factor > 1; 1 otherwise) — so
//     q·k grows by mscale² — the magnitude llama.cpp's context setup and rope_yarn produce.
//     transformers' _compute_yarn_parameters gives the same divisors (truncate = true) and the
//     same magnitude as its attention_factor.
//
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem {

struct Llama3RopeScaling {
  float factor = 8.f;
  float low_freq_factor = 1.f;
  float high_freq_factor = 4.f;
  int32_t original_max_position = 8192;
};

// head_dim/2 divisors. InvalidArgument naming the field for factor <= 0, low_freq_factor <= 0,
// high_freq_factor <= low_freq_factor, original_max_position <= 0, or odd/non-positive head_dim.
[[nodiscard]] absl::StatusOr<std::vector<float>> Llama3RopeFreqFactors(
    int32_t head_dim, float theta, const Llama3RopeScaling& scaling);

struct YarnRopeScaling {
  float factor = 4.f;
  int32_t original_max_position = 4096;  // the context the model was trained with
  float beta_fast = 32.f;
  float beta_slow = 1.f;
  float ext_factor = 1.f;   // 0: plain linear interpolation, no magnitude correction
  float attn_factor = 1.f;  // multiplies the magnitude (GGUF rope.scaling.attn_factor)
};

struct YarnRope {
  std::vector<float> freq_factors;  // head_dim/2 divisors
  float mscale = 1.f;               // multiplies cos and sin
};

// InvalidArgument naming the field for factor <= 0, original_max_position <= 0, non-finite or
// negative betas / ext_factor, attn_factor <= 0, theta <= 0 or odd/non-positive head_dim.
[[nodiscard]] absl::StatusOr<YarnRope> YarnRopeParams(int32_t head_dim, float theta,
                                                      const YarnRopeScaling& scaling);

// head_dim/2 copies of `factor`; InvalidArgument unless factor is finite and > 0.
[[nodiscard]] absl::StatusOr<std::vector<float>> LinearRopeFreqFactors(int32_t head_dim,
                                                                       float factor);

}  // namespace tandem
