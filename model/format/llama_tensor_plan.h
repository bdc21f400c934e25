// The tensors a Llama checkpoint must provide for a given config, with their expected shapes
// (outermost first) and where each lands in LlamaWeights, plus each tensor's name in the GGUF
// and the HF (safetensors) naming schemes. Both loaders walk this one plan, so they check the
// same shapes and fill the same fields.
//
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/format/llama_weights.h"

namespace tandem {

enum class LlamaTensorRole {
  kTokenEmbedding,
  kOutputNorm,
  kOutput,
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kBq,
  kBk,
  kBv,
  kQNorm,
  kKNorm,
  kWo,
  kFfnNorm,
  kGate,
  kUp,
  kDown,
  kWqkv,    // Q, K, V rows in one matrix (config.fused_qkv_gate_up)
  kGateUp,  // gate rows, then up rows (config.fused_qkv_gate_up)
};

struct LlamaTensorSlot {
  LlamaTensorRole role;
  int layer;                   // -1 for model-level tensors
  std::vector<int64_t> shape;  // expected, outermost first
  Tensor* dst;                 // field of the LlamaWeights the plan was made for
};

// Every tensor `config` requires: biases only when config.has_qkv_bias, Q/K norms only when
// config.has_qk_norm, the output matrix only when !config.tied_embeddings; with
// config.fused_qkv_gate_up, kWqkv lands in the layer's wq and kGateUp in its w_gate until
// SplitFusedLlamaTensors splits them. Resizes weights->layers
// to config.num_layers. REQUIRES: CheckLayersFitTensors(config, ...) is OK (the layers are
// allocated up front).
std::vector<LlamaTensorSlot> PlanLlamaTensors(const LlamaConfig& config, LlamaWeights* weights);

// After a fused checkpoint's tensors are read (config.fused_qkv_gate_up; no-op otherwise): each
// layer's wq holding [q + 2·kv][hidden] becomes wq, wk, wv and its w_gate holding
// [2·intermediate][hidden] becomes w_gate, w_up, by whole rows (f32 values or quantised row
// bytes alike). InvalidArgument when a fused matrix does not have the planned rows.
[[nodiscard]] absl::Status SplitFusedLlamaTensors(LlamaWeights* weights);

// A checkpoint holding `tensors` tensors cannot back more layers than that: InvalidArgument
// ("<source>: the config's 790626049 layers are more than the 21 tensors the checkpoint holds")
// before PlanLlamaTensors allocates per-layer state, so a lying layer count fails at once instead
// of exhausting memory. A smaller shortfall is left to the loader's "missing tensor" error.
[[nodiscard]] absl::Status CheckLayersFitTensors(const LlamaConfig& config, size_t tensors,
                                                 absl::string_view source);

std::string GgufTensorName(LlamaTensorRole role, int layer);  // e.g. "blk.3.attn_q.weight"
std::string HfTensorName(LlamaTensorRole role,
                         int layer);  // "model.layers.3.self_attn.q_proj.weight"

// Sizes positive, heads divisible (num_q_heads % num_kv_heads == 0), head_dim even, eps and
// theta positive, rope_freq_factors empty or head_dim/2 finite positive values.
// InvalidArgument naming the field.
[[nodiscard]] absl::Status ValidateLlamaConfig(const LlamaConfig& config);

// "[576, 1536]"
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace tandem
