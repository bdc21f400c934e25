// A Llama-family model in memory: configuration plus weights — f32, or matrices kept in their
// file's GGML block format when the loader is asked to (LoadOptions::keep_quantized).
//
// Conventions (what the forward pass relies on):
//   * Matrices are row-major [out_features][in_features] (GGUF ne0 = in_features; HF `weight`).
//     So q = x · wq^T with wq of shape [num_q_heads·head_dim][hidden].
//   * Q/K rows are in the file's own RoPE convention, recorded in `rope_style`: GGUF llama files
//     are written for adjacent-pair rotation, HF checkpoints for rotate-half. No permutation is
//     applied at load.
//   * Optional tensors (QKV biases, Q/K norms, separate output matrix) are empty when absent.
//   * Architectures: "llama" (and Mistral, which GGUF and HF both call llama), "qwen2" (llama
//     with QKV biases, rotate-half RoPE) and "qwen3" (per-head RMSNorm of Q and K after the
//     projections and before RoPE, rotate-half RoPE) and "phi3" (llama with fused QKV and
//     gate/up matrices, split at load; rotate-half RoPE). The forward differs only by the flags
//     below, never by the architecture's name.
//
// Immutable after load; safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/format/ggml_types.h"

namespace tandem {

enum class RopeStyle : uint8_t {
  kAdjacentPairs,  // rotate (x[2i], x[2i+1]) — GGUF llama, ggml "normal" mode
  kRotateHalf,     // rotate (x[i], x[i + d/2]) — HF transformers, ggml "neox" mode
};

struct LlamaConfig {
  std::string name;          // e.g. general.name, or the directory name for HF checkpoints
  std::string architecture;  // "llama", "qwen2", "qwen3" or "phi3"
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t max_context = 0;  // context length the model was trained for
  float rope_theta = 10000.f;
  float rms_norm_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  bool tied_embeddings = false;  // LM head = token embedding
  bool has_qkv_bias = false;
  // Per-head RMSNorm of Q and K (weights [head_dim], eps rms_norm_eps) after the projections and
  // biases, before RoPE (qwen3).
  bool has_qk_norm = false;
  // The checkpoint stores Q, K and V as one matrix [q + 2·kv rows][hidden] (GGUF attn_qkv, HF
  // qkv_proj) and gate and up as one [2·intermediate][hidden], gate rows first (GGUF ffn_up, HF
  // gate_up_proj), as phi3 does. The loaders read the fused matrices and split them by rows
  // (SplitFusedLlamaTensors: quantised rows stay quantised), so the weights, and everything
  // downstream of them, hold the separate matrices.
  bool fused_qkv_gate_up = false;
  // RoPE frequency divisors, empty or head_dim/2 entries: pair i rotates by
  // pos · rope_theta^(−2i/head_dim) / rope_freq_factors[i]. Llama 3's rope_scaling (GGUF:
  // the rope_freqs.weight tensor), linear scaling (every entry = factor) and YaRN's blend of
  // interpolated and extrapolated frequencies (model/format/rope_scaling.h) are expressed so.
  std::vector<float> rope_freq_factors;
  // RoPE's cos and sin are multiplied by this (so q·k by its square): YaRN's magnitude
  // correction, 1 otherwise.
  float rope_mscale = 1.f;
};

// A tensor. shape is outermost first: a matrix [out][in] has shape {out, in}.
// type kF32: the values are in `data`. Any other type: a matrix kept as the file stores it —
// `blocks` holds its rows back to back, each a whole number of `type` blocks — and `data` is
// empty (model/format/dequant.h converts it).
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  GgmlType type = GgmlType::kF32;
  std::vector<uint8_t> blocks;

  bool empty() const { return data.empty() && blocks.empty(); }
  bool quantized() const { return type != GgmlType::kF32; }
  int64_t dim(int i) const { return shape[i]; }
  int64_t numel() const {
    if (!quantized()) return static_cast<int64_t>(data.size());
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct LlamaLayerWeights {
  Tensor attn_norm;   // [hidden]
  Tensor wq;          // [num_q_heads·head_dim][hidden]
  Tensor wk;          // [num_kv_heads·head_dim][hidden]
  Tensor wv;          // [num_kv_heads·head_dim][hidden]
  Tensor bq, bk, bv;  // [rows of wq/wk/wv] or empty
  Tensor q_norm;      // [head_dim] or empty (config.has_qk_norm)
  Tensor k_norm;      // [head_dim] or empty
  Tensor wo;          // [hidden][num_q_heads·head_dim]
  Tensor ffn_norm;    // [hidden]
  Tensor w_gate;      // [intermediate][hidden]
  Tensor w_up;        // [intermediate][hidden]
  Tensor w_down;      // [hidden][intermediate]
};

struct LlamaWeights {
  LlamaConfig config;
  Tensor token_embedding;  // [vocab][hidden]
  Tensor output_norm;      // [hidden]
  Tensor output;           // [vocab][hidden], empty when config.tied_embeddings
  std::vector<LlamaLayerWeights> layers;

  const Tensor& lm_head() const { return config.tied_embeddings ? token_embedding : output; }
};

}  // namespace tandem
