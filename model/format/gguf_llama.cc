#include "model/format/gguf_llama.h"

#include <cmath>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/dequant.h"
#include "model/format/llama_tensor_plan.h"
#include "model/format/parallel_dequant.h"
#include "model/format/rope_scaling.h"

namespace tandem {
namespace {

absl::StatusOr<int32_t> GetInt32(const GgufFile& f, const std::string& key) {
  TANDEM_ASSIGN_OR_RETURN(const int64_t v, f.GetInt(key));
  if (v <= 0 || v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": metadata key '", key, "' is ", v, " (must be in [1, 2^31))"));
  }
  return static_cast<int32_t>(v);
}

absl::StatusOr<int32_t> GetInt32Or(const GgufFile& f, const std::string& key, int32_t fallback) {
  return f.Has(key) ? GetInt32(f, key) : fallback;
}

absl::StatusOr<float> GetFloatOr(const GgufFile& f, const std::string& key, float fallback) {
  if (!f.Has(key)) return fallback;
  TANDEM_ASSIGN_OR_RETURN(const double v, f.GetFloat(key));
  return static_cast<float>(v);
}

// <arch>.rope.scaling.type yarn: rope.scaling.factor, rope.scaling.original_context_length
// (default: context_length) and rope.scaling.attn_factor (default 1), read as llama.cpp reads
// them for these architectures. llama.cpp ignores the rope.scaling.yarn_* keys for llama, qwen2,
// qwen3 and phi3 (it uses beta_fast 32, beta_slow 1, ext_factor 1), so a file setting one to
// anything else has two readings; it is refused naming the key and value.
absl::StatusOr<YarnRope> ReadYarn(const GgufFile& f, const std::string& p, const LlamaConfig& c) {
  if (!f.Has(p + "rope.scaling.factor")) {
    return absl::NotFoundError(absl::StrCat(f.path(), ": ", p, "rope.scaling.type is 'yarn' but ",
                                            p, "rope.scaling.factor is missing"));
  }
  YarnRopeScaling y;
  TANDEM_ASSIGN_OR_RETURN(y.factor, GetFloatOr(f, p + "rope.scaling.factor", 0.f));
  TANDEM_ASSIGN_OR_RETURN(y.original_max_position,
                          GetInt32Or(f, p + "rope.scaling.original_context_length", c.max_context));
  TANDEM_ASSIGN_OR_RETURN(y.attn_factor, GetFloatOr(f, p + "rope.scaling.attn_factor", 1.f));
  const std::pair<const char*, float> llamacpp_defaults[] = {{"yarn_beta_fast", y.beta_fast},
                                                             {"yarn_beta_slow", y.beta_slow},
                                                             {"yarn_ext_factor", y.ext_factor},
                                                             {"yarn_log_multiplier", 0.f}};
  for (const auto& [key, want] : llamacpp_defaults) {
    TANDEM_ASSIGN_OR_RETURN(const float v, GetFloatOr(f, p + "rope.scaling." + key, want));
    if (v != want) {
      return absl::UnimplementedError(absl::StrCat(
          f.path(), ": ", p, "rope.scaling.", key, " = ", v,
          " is not supported (llama.cpp ignores it for this architecture and uses ", want, ")"));
    }
  }
  absl::StatusOr<YarnRope> yarn = YarnRopeParams(c.head_dim, c.rope_theta, y);
  if (!yarn.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": ", p, "rope.scaling: ", yarn.status().message()));
  }
  // The magnitude llama.cpp derives; a converter's yarn_attn_factor (transformers'
  // attention_factor) is accepted when it says the same.
  if (f.Has(p + "rope.scaling.yarn_attn_factor")) {
    TANDEM_ASSIGN_OR_RETURN(const float v,
                            GetFloatOr(f, p + "rope.scaling.yarn_attn_factor", yarn->mscale));
    if (std::abs(v - yarn->mscale) > 1e-5f * yarn->mscale) {
      return absl::UnimplementedError(
          absl::StrCat(f.path(), ": ", p, "rope.scaling.yarn_attn_factor = ", v,
                       " is not supported (llama.cpp ignores it for this architecture and uses ",
                       yarn->mscale, ")"));
    }
  }
  return yarn;
}

// <arch>.rope.scaling.type (none | linear with rope.scaling.factor | yarn) and the
// rope_freqs.weight tensor llama.cpp's converter writes for Llama 3's rope_scaling; all become
// divisors in c->rope_freq_factors (yarn also c->rope_mscale). Other scaling types are refused
// naming the key and value.
absl::Status ReadRopeScaling(const GgufFile& f, const std::string& p, LlamaConfig* c) {
  std::vector<float> factors;
  if (const GgufTensorInfo* info = f.FindTensor("rope_freqs.weight"); info != nullptr) {
    const std::vector<int64_t> want = {c->head_dim / 2};
    if (info->Shape() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": tensor 'rope_freqs.weight' has shape ", ShapeString(info->Shape()),
          ", expected ", ShapeString(want), " (head_dim/2)"));
    }
    factors.resize(static_cast<size_t>(c->head_dim / 2));
    TANDEM_RETURN_IF_ERROR(Dequantize(info->type, f.TensorData(*info), absl::MakeSpan(factors)));
  }
  if (f.Has(p + "rope.scaling.type")) {
    TANDEM_ASSIGN_OR_RETURN(const absl::string_view type, f.GetString(p + "rope.scaling.type"));
    std::vector<float> scaled;
    if (type == "linear") {
      if (!f.Has(p + "rope.scaling.factor")) {
        return absl::NotFoundError(absl::StrCat(f.path(), ": ", p,
                                                "rope.scaling.type is 'linear' but ", p,
                                                "rope.scaling.factor is missing"));
      }
      TANDEM_ASSIGN_OR_RETURN(const double factor, f.GetFloat(p + "rope.scaling.factor"));
      absl::StatusOr<std::vector<float>> linear =
          LinearRopeFreqFactors(c->head_dim, static_cast<float>(factor));
      if (!linear.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(f.path(), ": ", p, "rope.scaling.factor: ", linear.status().message()));
      }
      scaled = std::move(linear).value();
    } else if (type == "yarn") {
      TANDEM_ASSIGN_OR_RETURN(YarnRope yarn, ReadYarn(f, p, *c));
      scaled = std::move(yarn.freq_factors);
      c->rope_mscale = yarn.mscale;
    } else if (type != "none") {
      return absl::UnimplementedError(
          absl::StrCat(f.path(), ": ", p, "rope.scaling.type '", type,
                       "' is not supported (supported: none, linear, yarn, and Llama 3's "
                       "rope_freqs.weight)"));
    }
    // ggml divides each angle by rope_freqs (freq_factors) and scales it by freq_scale/YaRN:
    // the divisors multiply.
    if (!scaled.empty()) {
      if (factors.empty()) factors.assign(scaled.size(), 1.f);
      for (size_t i = 0; i < factors.size(); ++i) factors[i] *= scaled[i];
    }
  }
  c->rope_freq_factors = std::move(factors);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaConfig> ReadGgufLlamaConfig(const GgufFile& f) {
  LlamaConfig c;
  TANDEM_ASSIGN_OR_RETURN(const absl::string_view arch, f.GetString("general.architecture"));
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "phi3") {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": general.architecture '", arch,
                     "' is not supported (supported: llama, qwen2, qwen3, phi3)"));
  }
  c.architecture = std::string(arch);
  if (f.Has("general.name")) {
    TANDEM_ASSIGN_OR_RETURN(const absl::string_view name, f.GetString("general.name"));
    c.name = std::string(name);
  }
  const std::string p = absl::StrCat(arch, ".");
  TANDEM_ASSIGN_OR_RETURN(c.num_layers, GetInt32(f, p + "block_count"));
  TANDEM_ASSIGN_OR_RETURN(c.num_q_heads, GetInt32(f, p + "attention.head_count"));
  TANDEM_ASSIGN_OR_RETURN(c.num_kv_heads,
                          GetInt32Or(f, p + "attention.head_count_kv", c.num_q_heads));
  TANDEM_ASSIGN_OR_RETURN(c.hidden_size, GetInt32(f, p + "embedding_length"));
  TANDEM_ASSIGN_OR_RETURN(c.intermediate_size, GetInt32(f, p + "feed_forward_length"));
  TANDEM_ASSIGN_OR_RETURN(c.max_context, GetInt32(f, p + "context_length"));
  TANDEM_ASSIGN_OR_RETURN(c.rope_theta, GetFloatOr(f, p + "rope.freq_base", 10000.f));
  TANDEM_ASSIGN_OR_RETURN(c.rms_norm_eps,
                          GetFloatOr(f, p + "attention.layer_norm_rms_epsilon", 1e-5f));
  if (!f.Has(p + "attention.key_length") && c.hidden_size % c.num_q_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": embedding_length ", c.hidden_size, " is not a multiple of head_count ",
        c.num_q_heads, " and attention.key_length is absent"));
  }
  TANDEM_ASSIGN_OR_RETURN(c.head_dim,
                          GetInt32Or(f, p + "attention.key_length", c.hidden_size / c.num_q_heads));
  for (const char* key : {"attention.value_length", "rope.dimension_count"}) {
    TANDEM_ASSIGN_OR_RETURN(const int32_t v, GetInt32Or(f, p + key, c.head_dim));
    if (v != c.head_dim) {
      return absl::UnimplementedError(absl::StrCat(f.path(), ": ", p, key, " ", v,
                                                   " differs from head_dim ", c.head_dim,
                                                   " (not supported)"));
    }
  }
  // Features of these architectures' relatives that the forward does not implement: refused
  // by the key that announces them rather than run as something else.
  // A window no shorter than the context (Phi-3.5's) never drops a position: no window at all.
  for (const char* key : {"attention.sliding_window", "expert_count"}) {
    if (!f.Has(p + key)) continue;
    TANDEM_ASSIGN_OR_RETURN(const int64_t v, f.GetInt(p + key));
    if (std::string_view(key) == "expert_count" && v == 0) continue;
    if (std::string_view(key) == "attention.sliding_window" && v >= c.max_context) continue;
    return absl::UnimplementedError(absl::StrCat(
        f.path(), ": ", p, key, " = ", v, " is not supported (",
        std::string_view(key) == "expert_count" ? "mixture of experts" : "sliding-window attention",
        ")"));
  }
  // Phi-3's LongRoPE ("su") scaling: per-pair factors chosen by the sequence length, plus an
  // attention factor. Not implemented, so such a model is refused rather than run unscaled.
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (f.FindTensor(name) != nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          f.path(), ": tensor '", name, "' (Phi-3 LongRoPE / su RoPE scaling) is not supported"));
    }
  }
  TANDEM_RETURN_IF_ERROR(ReadRopeScaling(f, p, &c));
  // GGUF llama files are converted with Q/K rows permuted for adjacent-pair rotation; qwen2,
  // qwen3 and phi3 keep the HF rows and run ggml's NeoX (rotate-half) mode.
  c.rope_style = arch == "llama" ? RopeStyle::kAdjacentPairs : RopeStyle::kRotateHalf;
  c.has_qk_norm = arch == "qwen3";
  c.fused_qkv_gate_up = arch == "phi3";

  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::NotFoundError(absl::StrCat(f.path(), ": missing tensor 'token_embd.weight'"));
  }
  if (embd->dims.size() != 2 || embd->dims[1] > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor 'token_embd.weight' has ",
                                                   "shape ", ShapeString(embd->Shape()),
                                                   ", expected [vocab, hidden]"));
  }
  c.vocab_size = static_cast<int32_t>(embd->dims[1]);
  if (f.Has("tokenizer.ggml.tokens")) {
    TANDEM_ASSIGN_OR_RETURN(const auto tokens, f.GetStringArray("tokenizer.ggml.tokens"));
    if (tokens.size() != static_cast<size_t>(c.vocab_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": tokenizer.ggml.tokens has ", tokens.size(),
                       " entries but token_embd.weight has ", c.vocab_size, " rows"));
    }
  }
  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  c.has_qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  TANDEM_RETURN_IF_ERROR(ValidateLlamaConfig(c));
  return c;
}

bool KeepsQuantized(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<LlamaWeights> LoadGgufLlama(const GgufFile& f, bool keep_quantized) {
  LlamaWeights w;
  TANDEM_ASSIGN_OR_RETURN(w.config, ReadGgufLlamaConfig(f));
  TANDEM_RETURN_IF_ERROR(CheckLayersFitTensors(w.config, f.tensors().size(), f.path()));
  const std::vector<LlamaTensorSlot> plan = PlanLlamaTensors(w.config, &w);
  std::vector<const GgufTensorInfo*> infos;
  infos.reserve(plan.size());
  // Check everything before converting anything: a bad file fails in milliseconds.
  for (const LlamaTensorSlot& slot : plan) {
    const std::string name = GgufTensorName(slot.role, slot.layer);
    const GgufTensorInfo* info = f.FindTensor(name);
    if (info == nullptr) {
      return absl::NotFoundError(absl::StrCat(f.path(), ": missing tensor '", name, "'"));
    }
    if (info->Shape() != slot.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": tensor '", name, "' has shape ", ShapeString(info->Shape()),
                       ", expected ", ShapeString(slot.shape), " from the model config"));
    }
    if (!GgmlTypeTraits(info->type).dequantizable) {
      return absl::UnimplementedError(absl::StrCat(f.path(), ": tensor '", name, "' has type ",
                                                   GgmlTypeName(info->type),
                                                   ", which Tandem cannot dequantise"));
    }
    infos.push_back(info);
  }
  std::vector<DequantJob> jobs;
  jobs.reserve(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    if (keep_quantized && plan[i].shape.size() == 2 && KeepsQuantized(infos[i]->type)) {
      const absl::Span<const uint8_t> src = f.TensorData(*infos[i]);
      TANDEM_RETURN_IF_ERROR(
          ValidateDequantize(infos[i]->type, plan[i].shape[0] * plan[i].shape[1], src.size()));
      plan[i].dst->shape = plan[i].shape;
      plan[i].dst->type = infos[i]->type;
      plan[i].dst->blocks.assign(src.begin(), src.end());
      continue;
    }
    jobs.push_back({infos[i]->type, f.TensorData(*infos[i]), plan[i].shape, plan[i].dst});
  }
  TANDEM_RETURN_IF_ERROR(DequantizeAll(jobs));
  TANDEM_RETURN_IF_ERROR(SplitFusedLlamaTensors(&w));
  return w;
}

}  // namespace tandem
