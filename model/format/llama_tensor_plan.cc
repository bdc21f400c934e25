#include "model/format/llama_tensor_plan.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace tandem {

std::vector<LlamaTensorSlot> PlanLlamaTensors(const LlamaConfig& c, LlamaWeights* w) {
  const int64_t hidden = c.hidden_size, q = int64_t{c.num_q_heads} * c.head_dim,
                kv = int64_t{c.num_kv_heads} * c.head_dim, ffn = c.intermediate_size;
  std::vector<LlamaTensorSlot> plan;
  using R = LlamaTensorRole;
  plan.push_back({R::kTokenEmbedding, -1, {c.vocab_size, hidden}, &w->token_embedding});
  plan.push_back({R::kOutputNorm, -1, {hidden}, &w->output_norm});
  if (!c.tied_embeddings) plan.push_back({R::kOutput, -1, {c.vocab_size, hidden}, &w->output});
  w->layers.resize(static_cast<size_t>(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    LlamaLayerWeights& l = w->layers[static_cast<size_t>(i)];
    plan.push_back({R::kAttnNorm, i, {hidden}, &l.attn_norm});
    if (c.fused_qkv_gate_up) {
      plan.push_back({R::kWqkv, i, {q + 2 * kv, hidden}, &l.wq});
    } else {
      plan.push_back({R::kWq, i, {q, hidden}, &l.wq});
      plan.push_back({R::kWk, i, {kv, hidden}, &l.wk});
      plan.push_back({R::kWv, i, {kv, hidden}, &l.wv});
    }
    if (c.has_qkv_bias) {
      plan.push_back({R::kBq, i, {q}, &l.bq});
      plan.push_back({R::kBk, i, {kv}, &l.bk});
      plan.push_back({R::kBv, i, {kv}, &l.bv});
    }
    if (c.has_qk_norm) {
      plan.push_back({R::kQNorm, i, {c.head_dim}, &l.q_norm});
      plan.push_back({R::kKNorm, i, {c.head_dim}, &l.k_norm});
    }
    plan.push_back({R::kWo, i, {hidden, q}, &l.wo});
    plan.push_back({R::kFfnNorm, i, {hidden}, &l.ffn_norm});
    if (c.fused_qkv_gate_up) {
      plan.push_back({R::kGateUp, i, {2 * ffn, hidden}, &l.w_gate});
    } else {
      plan.push_back({R::kGate, i, {ffn, hidden}, &l.w_gate});
      plan.push_back({R::kUp, i, {ffn, hidden}, &l.w_up});
    }
    plan.push_back({R::kDown, i, {hidden, ffn}, &l.w_down});
  }
  return plan;
}

namespace {

// Rows [begin, begin + rows) of matrix t ([n][k]): f32 values, or whole quantised rows.
Tensor RowSlice(const Tensor& t, int64_t begin, int64_t rows) {
  Tensor out;
  out.shape = {rows, t.shape[1]};
  out.type = t.type;
  if (t.quantized()) {
    const size_t row_bytes = t.blocks.size() / static_cast<size_t>(t.shape[0]);
    out.blocks.assign(t.blocks.begin() + static_cast<ptrdiff_t>(begin * row_bytes),
                      t.blocks.begin() + static_cast<ptrdiff_t>((begin + rows) * row_bytes));
  } else {
    const int64_t k = t.shape[1];
    out.data.assign(t.data.begin() + begin * k, t.data.begin() + (begin + rows) * k);
  }
  return out;
}

// Splits `fused` by rows into parts of the given row counts.
absl::Status SplitRows(const std::string& what, Tensor fused,
                       std::initializer_list<std::pair<int64_t, Tensor*>> parts) {
  int64_t total = 0;
  for (const auto& [rows, dst] : parts) total += rows;
  if (fused.shape.size() != 2 || fused.shape[0] != total) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has shape ", ShapeString(fused.shape), ", expected ", total, " rows"));
  }
  int64_t at = 0;
  for (const auto& [rows, dst] : parts) {
    *dst = RowSlice(fused, at, rows);
    at += rows;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SplitFusedLlamaTensors(LlamaWeights* w) {
  const LlamaConfig& c = w->config;
  if (!c.fused_qkv_gate_up) return absl::OkStatus();
  const int64_t q = int64_t{c.num_q_heads} * c.head_dim, kv = int64_t{c.num_kv_heads} * c.head_dim;
  for (size_t i = 0; i < w->layers.size(); ++i) {
    LlamaLayerWeights& l = w->layers[i];
    Tensor qkv = std::move(l.wq), gate_up = std::move(l.w_gate);
    l.wq = Tensor{};
    l.w_gate = Tensor{};
    TANDEM_RETURN_IF_ERROR(SplitRows(absl::StrCat("layer ", i, " fused QKV"), std::move(qkv),
                                     {{q, &l.wq}, {kv, &l.wk}, {kv, &l.wv}}));
    TANDEM_RETURN_IF_ERROR(
        SplitRows(absl::StrCat("layer ", i, " fused gate/up"), std::move(gate_up),
                  {{c.intermediate_size, &l.w_gate}, {c.intermediate_size, &l.w_up}}));
  }
  return absl::OkStatus();
}

absl::Status CheckLayersFitTensors(const LlamaConfig& c, size_t tensors, absl::string_view source) {
  if (c.num_layers > 0 && static_cast<uint64_t>(c.num_layers) > tensors) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the config's ", c.num_layers,
                                                   " layers are more than the ", tensors,
                                                   " tensors the checkpoint holds"));
  }
  return absl::OkStatus();
}

std::string GgufTensorName(LlamaTensorRole role, int layer) {
  const std::string blk = absl::StrCat("blk.", layer, ".");
  switch (role) {
    case LlamaTensorRole::kTokenEmbedding:
      return "token_embd.weight";
    case LlamaTensorRole::kOutputNorm:
      return "output_norm.weight";
    case LlamaTensorRole::kOutput:
      return "output.weight";
    case LlamaTensorRole::kAttnNorm:
      return blk + "attn_norm.weight";
    case LlamaTensorRole::kWq:
      return blk + "attn_q.weight";
    case LlamaTensorRole::kWk:
      return blk + "attn_k.weight";
    case LlamaTensorRole::kWv:
      return blk + "attn_v.weight";
    case LlamaTensorRole::kBq:
      return blk + "attn_q.bias";
    case LlamaTensorRole::kBk:
      return blk + "attn_k.bias";
    case LlamaTensorRole::kBv:
      return blk + "attn_v.bias";
    case LlamaTensorRole::kQNorm:
      return blk + "attn_q_norm.weight";
    case LlamaTensorRole::kKNorm:
      return blk + "attn_k_norm.weight";
    case LlamaTensorRole::kWo:
      return blk + "attn_output.weight";
    case LlamaTensorRole::kFfnNorm:
      return blk + "ffn_norm.weight";
    case LlamaTensorRole::kGate:
      return blk + "ffn_gate.weight";
    case LlamaTensorRole::kUp:
      return blk + "ffn_up.weight";
    case LlamaTensorRole::kDown:
      return blk + "ffn_down.weight";
    case LlamaTensorRole::kWqkv:
      return blk + "attn_qkv.weight";
    case LlamaTensorRole::kGateUp:
      return blk + "ffn_up.weight";
  }
  return "";
}

std::string HfTensorName(LlamaTensorRole role, int layer) {
  const std::string blk = absl::StrCat("model.layers.", layer, ".");
  switch (role) {
    case LlamaTensorRole::kTokenEmbedding:
      return "model.embed_tokens.weight";
    case LlamaTensorRole::kOutputNorm:
      return "model.norm.weight";
    case LlamaTensorRole::kOutput:
      return "lm_head.weight";
    case LlamaTensorRole::kAttnNorm:
      return blk + "input_layernorm.weight";
    case LlamaTensorRole::kWq:
      return blk + "self_attn.q_proj.weight";
    case LlamaTensorRole::kWk:
      return blk + "self_attn.k_proj.weight";
    case LlamaTensorRole::kWv:
      return blk + "self_attn.v_proj.weight";
    case LlamaTensorRole::kBq:
      return blk + "self_attn.q_proj.bias";
    case LlamaTensorRole::kBk:
      return blk + "self_attn.k_proj.bias";
    case LlamaTensorRole::kBv:
      return blk + "self_attn.v_proj.bias";
    case LlamaTensorRole::kQNorm:
      return blk + "self_attn.q_norm.weight";
    case LlamaTensorRole::kKNorm:
      return blk + "self_attn.k_norm.weight";
    case LlamaTensorRole::kWo:
      return blk + "self_attn.o_proj.weight";
    case LlamaTensorRole::kFfnNorm:
      return blk + "post_attention_layernorm.weight";
    case LlamaTensorRole::kGate:
      return blk + "mlp.gate_proj.weight";
    case LlamaTensorRole::kUp:
      return blk + "mlp.up_proj.weight";
    case LlamaTensorRole::kDown:
      return blk + "mlp.down_proj.weight";
    case LlamaTensorRole::kWqkv:
      return blk + "self_attn.qkv_proj.weight";
    case LlamaTensorRole::kGateUp:
      return blk + "mlp.gate_up_proj.weight";
  }
  return "";
}

absl::Status ValidateLlamaConfig(const LlamaConfig& c) {
  const std::pair<const char*, int32_t> sizes[] = {{"vocab_size", c.vocab_size},
                                                   {"hidden_size", c.hidden_size},
                                                   {"intermediate_size", c.intermediate_size},
                                                   {"num_layers", c.num_layers},
                                                   {"num_q_heads", c.num_q_heads},
                                                   {"num_kv_heads", c.num_kv_heads},
                                                   {"head_dim", c.head_dim},
                                                   {"max_context", c.max_context}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: ", name, " is ", value, " (must be positive)"));
    }
  }
  if (c.num_q_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: num_q_heads ", c.num_q_heads,
                                                   " is not a multiple of num_kv_heads ",
                                                   c.num_kv_heads));
  }
  if (c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: head_dim ", c.head_dim, " is odd (RoPE rotates pairs)"));
  }
  if (!c.rope_freq_factors.empty()) {
    if (c.rope_freq_factors.size() != static_cast<size_t>(c.head_dim / 2)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: rope_freq_factors has ", c.rope_freq_factors.size(),
                       " entries, expected head_dim/2 = ", c.head_dim / 2));
    }
    for (size_t i = 0; i < c.rope_freq_factors.size(); ++i) {
      const float f = c.rope_freq_factors[i];
      if (!(f > 0.f) || !std::isfinite(f)) {
        return absl::InvalidArgumentError(absl::StrCat("model config: rope_freq_factors[", i,
                                                       "] is ", f, " (must be finite, > 0)"));
      }
    }
  }
  if (!(c.rope_mscale > 0.f) || !std::isfinite(c.rope_mscale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: rope_mscale is ", c.rope_mscale, " (must be finite, > 0)"));
  }
  if (!(c.rms_norm_eps > 0.f) || !(c.rope_theta > 0.f)) {
    return absl::InvalidArgumentError(absl::StrCat("model config: rms_norm_eps ", c.rms_norm_eps,
                                                   " and rope_theta ", c.rope_theta,
                                                   " must be positive"));
  }
  return absl::OkStatus();
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace tandem
