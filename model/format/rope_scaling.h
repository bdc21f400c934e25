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

// head_dim/2 copies of `factor`; InvalidArgument unless factor is finite and > 0.
[[nodiscard]] absl::StatusOr<std::vector<float>> LinearRopeFreqFactors(int32_t head_dim,
                                                                       float factor);

}  // namespace tandem
