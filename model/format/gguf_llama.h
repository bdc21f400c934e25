// Llama-family weights from a GGUF file (general.architecture = "llama", "qwen2" or "qwen3"),
// dequantised to f32.
//
// Config from <arch>.* metadata: block_count, attention.head_count, attention.head_count_kv
// (default: head_count), embedding_length, feed_forward_length, context_length,
// rope.freq_base (default 10000), attention.layer_norm_rms_epsilon (default 1e-5),
// attention.key_length (head_dim; default embedding_length / head_count) and
// rope.dimension_count (must equal head_dim: partial rotary is not supported). The vocabulary
// size is token_embd's row count and must match tokenizer.ggml.tokens when present. Output is
// tied when output.weight is absent; QKV biases are loaded when blk.0.attn_q.bias exists
// (qwen2 has them); qwen3 has blk.N.attn_q_norm/attn_k_norm.weight ([head_dim]).
// rope_style is kAdjacentPairs for llama (llama.cpp's converter permutes its Q/K rows for it)
// and kRotateHalf for qwen2/qwen3 (ggml's NeoX mode, rows as in HF). RoPE scaling: a
// rope_freqs.weight tensor (Llama 3, [head_dim/2] divisors) and rope.scaling.type none/linear
// (with rope.scaling.factor)/yarn (factor, original_context_length, attn_factor; YaRN's
// magnitude goes to LlamaConfig::rope_mscale) become LlamaConfig::rope_freq_factors. Refused
// naming the key and value: other architectures, other rope.scaling.type values (longrope, ...),
// rope.scaling.yarn_* keys that differ from what llama.cpp uses for these architectures,
// attention.sliding_window, expert_count > 0. Every tensor's shape is checked against the
// config before any is dequantised.
//
// Errors: NotFound (missing key/tensor), InvalidArgument (bad value, shape mismatch),
// Unimplemented (other architecture, rope scaling, tensor type we cannot dequantise).
#pragma once

#include "absl/status/statusor.h"
#include "model/format/gguf_file.h"
#include "model/format/llama_weights.h"

namespace tandem {

// Config only (metadata + tensor infos; of tensor data only the small rope_freqs.weight).
[[nodiscard]] absl::StatusOr<LlamaConfig> ReadGgufLlamaConfig(const GgufFile& file);

// keep_quantized: matrices whose type the CPU kernels read directly (KeepsQuantized) are copied
// as the file's blocks (Tensor::blocks) instead of being dequantised; vectors (norms, biases)
// and other types are dequantised as always.
[[nodiscard]] absl::StatusOr<LlamaWeights> LoadGgufLlama(const GgufFile& file,
                                                         bool keep_quantized = false);

// Whether a matrix of `type` stays in its block format under keep_quantized: Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, F16, BF16.
bool KeepsQuantized(GgmlType type);

}  // namespace tandem
