// Synthetic Llama-family models for tests and benchmarks: a small random model with a fixed seed
// and chosen dimensions, written as GGUF with the byte-level BPE vocabulary of synthetic_vocab.h
// (eos = <|im_end|>, bos = <|im_start|>, pre-tokenizer "smollm"). Architectures: llama, qwen2
// (QKV biases always), qwen3 (per-head attn_q_norm/attn_k_norm), phi3 (fused attn_qkv and ffn_up
// = gate rows then up rows; needs q_heads·head_dim = hidden); metadata under "<arch>.", as
// llama.cpp reads it. RoPE scaling: linear (rope.scaling.type/factor), yarn (rope.scaling.type,
// factor and original_context_length, as llama.cpp's converter writes them) or llama3 (a
// rope_freqs.weight tensor of divisors, as llama.cpp's converter writes for Llama 3.x, from
// factor, low 1, high 4); the original context is rope_original_context, default
// context / factor.
//
// Initialisation keeps activations O(1) and logits well separated so greedy decoding is
// stable under the reordered sums of different shardings: uniform weights with
// std 1/sqrt(fan_in) for projections, std 1 for the embedding, std 2/sqrt(hidden) for the LM
// head (logit std ~2), norm weights 1 ± 0.1. Each tensor has its own generator seeded from
// (seed, tensor name), so the same seed gives bit-identical weights on every platform, and
// models differing only in layer count share their common layers.
//
// Pure apart from WriteSyntheticModel; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/format/ggml_types.h"
#include "model/format/gguf_writer.h"

namespace tandem {

enum class SyntheticRopeScaling { kNone, kLinear, kLlama3, kYarn };

struct SyntheticModelOptions {
  std::string arch = "llama";  // llama, qwen2, qwen3 or phi3 (fused attn_qkv and ffn_up)
  SyntheticRopeScaling rope_scaling = SyntheticRopeScaling::kNone;
  float rope_scaling_factor = 4.f;
  int rope_original_context = 0;  // yarn, llama3: the pre-scaling context; 0: context / factor
  uint64_t seed = 1;
  int layers = 2;
  int hidden = 128;
  int q_heads = 8;
  int kv_heads = 2;
  int head_dim = 16;
  int intermediate = 256;
  int vocab = 320;  // 3 specials + 256 bytes + merges (+ reserved tokens past the corpus)
  int context = 2048;
  GgmlType dtype = GgmlType::kF32;  // matrices: F32, F16 or Q8_0 (norms stay F32)
  bool tied_embeddings = false;
  bool qkv_bias = false;
  float rope_theta = 10000.f;
  float rms_norm_eps = 1e-5f;
};

// InvalidArgument naming the offending option (unknown arch, non-positive sizes,
// q_heads % kv_heads != 0, odd head_dim, non-positive rope scaling factor, unsupported dtype,
// Q8_0 rows not a multiple of 32, vocab below the minimum).
[[nodiscard]] absl::Status ValidateSyntheticOptions(const SyntheticModelOptions& options);

[[nodiscard]] absl::StatusOr<GgufWriter> BuildSyntheticModel(const SyntheticModelOptions& options);

[[nodiscard]] absl::Status WriteSyntheticModel(const SyntheticModelOptions& options,
                                               const std::string& path);

}  // namespace tandem
