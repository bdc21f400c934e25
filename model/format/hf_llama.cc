#include "model/format/hf_llama.h"

#include <limits>
#include <optional>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/json_value.h"
#include "model/format/llama_tensor_plan.h"
#include "model/format/mapped_file.h"
#include "model/format/parallel_dequant.h"
#include "model/format/rope_scaling.h"

namespace tandem {
namespace {

constexpr uint64_t kMaxJsonBytes = 64 << 20;

absl::StatusOr<int32_t> Int32Field(const nlohmann::json& s, absl::string_view key,
                                   std::optional<int32_t> fallback) {
  const nlohmann::json* v = FindField(s, key);
  const std::string what = absl::StrCat("config.json: ", key);
  if (v == nullptr) {
    if (fallback.has_value()) return *fallback;
    return absl::NotFoundError(what + " is missing");
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t x, JsonInt(*v, what));
  if (x <= 0 || x > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", x, " (must be in [1, 2^31))"));
  }
  return static_cast<int32_t>(x);
}

absl::StatusOr<float> FloatField(const nlohmann::json& s, absl::string_view key, float fallback) {
  const nlohmann::json* v = FindField(s, key);
  if (v == nullptr) return fallback;
  TANDEM_ASSIGN_OR_RETURN(const double x, JsonNumber(*v, absl::StrCat("config.json: ", key)));
  return static_cast<float>(x);
}

absl::StatusOr<bool> BoolField(const nlohmann::json& s, absl::string_view key) {
  const nlohmann::json* v = FindField(s, key);
  if (v == nullptr) return false;
  return JsonBool(*v, absl::StrCat("config.json: ", key));
}

// Qwen configs carry sliding_window but apply it only with use_sliding_window; Mistral's applies
// whenever it is set and shorter than the context.
absl::Status RefuseSlidingWindow(const nlohmann::json& s, const LlamaConfig& c) {
  if (c.architecture == "qwen2" || c.architecture == "qwen3") {
    TANDEM_ASSIGN_OR_RETURN(const bool use, BoolField(s, "use_sliding_window"));
    if (use) {
      return absl::UnimplementedError(
          "config.json: use_sliding_window true is not supported (sliding-window attention)");
    }
    return absl::OkStatus();
  }
  const nlohmann::json* v = FindField(s, "sliding_window");
  if (v == nullptr || v->is_null()) {
    return absl::OkStatus();
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t window, JsonInt(*v, "config.json: sliding_window"));
  if (window > 0 && window < c.max_context) {
    return absl::UnimplementedError(absl::StrCat("config.json: sliding_window ", window,
                                                 " is not supported (sliding-window attention "
                                                 "shorter than max_position_embeddings ",
                                                 c.max_context, ")"));
  }
  return absl::OkStatus();
}

// rope_scaling "yarn" as transformers' _compute_yarn_parameters reads it: factor,
// original_max_position_embeddings (default max_position_embeddings), beta_fast (32), beta_slow
// (1) and attention_factor (default 1 + 0.1 ln factor: the magnitude, replacing it). DeepSeek's
// mscale/mscale_all_dim and truncate false are refused by name.
absl::StatusOr<YarnRope> ReadHfYarn(const nlohmann::json& rs, const LlamaConfig& c) {
  for (const char* key : {"mscale", "mscale_all_dim"}) {
    const nlohmann::json* v = FindField(rs, key);
    if (v == nullptr || v->is_null()) continue;
    return absl::UnimplementedError(absl::StrCat("config.json: rope_scaling.", key, " ", v->dump(),
                                                 " is not supported (yarn)"));
  }
  if (const nlohmann::json* v = FindField(rs, "truncate"); v != nullptr && !v->is_null()) {
    TANDEM_ASSIGN_OR_RETURN(const bool truncate,
                            JsonBool(*v, "config.json: rope_scaling.truncate"));
    if (!truncate) {
      return absl::UnimplementedError(
          "config.json: rope_scaling.truncate false is not supported (yarn)");
    }
  }
  YarnRopeScaling y;
  TANDEM_ASSIGN_OR_RETURN(y.factor, FloatField(rs, "factor", 0.f));
  TANDEM_ASSIGN_OR_RETURN(y.original_max_position,
                          Int32Field(rs, "original_max_position_embeddings", c.max_context));
  TANDEM_ASSIGN_OR_RETURN(y.beta_fast, FloatField(rs, "beta_fast", y.beta_fast));
  TANDEM_ASSIGN_OR_RETURN(y.beta_slow, FloatField(rs, "beta_slow", y.beta_slow));
  TANDEM_ASSIGN_OR_RETURN(const float attention_factor, FloatField(rs, "attention_factor", 0.f));
  absl::StatusOr<YarnRope> yarn = YarnRopeParams(c.head_dim, c.rope_theta, y);
  if (!yarn.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", yarn.status().message()));
  }
  if (FindField(rs, "attention_factor") != nullptr) {
    if (!(attention_factor > 0.f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: rope_scaling.attention_factor is ", attention_factor, " (must be > 0)"));
    }
    yarn->mscale = attention_factor;
  }
  return yarn;
}

// rope_scaling: null/absent or rope_type (older configs: type) "default" -> none; "linear"
// {factor}; "llama3" {factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}; "yarn" (ReadHfYarn). Anything else is refused naming the
// value.
absl::Status ReadRopeScaling(const nlohmann::json& s, LlamaConfig* c) {
  const nlohmann::json* v = FindField(s, "rope_scaling");
  if (v == nullptr || v->is_null()) {
    return absl::OkStatus();
  }
  if (!v->is_object()) {
    return absl::InvalidArgumentError("config.json: rope_scaling is neither null nor an object");
  }
  const nlohmann::json& rs = *v;
  const nlohmann::json* t = FindField(rs, "rope_type");
  if (t == nullptr) t = FindField(rs, "type");
  if (t == nullptr) {
    return absl::InvalidArgumentError("config.json: rope_scaling has neither rope_type nor type");
  }
  TANDEM_ASSIGN_OR_RETURN(const std::string type,
                          JsonString(*t, "config.json: rope_scaling.rope_type"));
  absl::StatusOr<std::vector<float>> factors;
  if (type == "default") {
    return absl::OkStatus();
  } else if (type == "linear") {
    TANDEM_ASSIGN_OR_RETURN(const float factor, FloatField(rs, "factor", 0.f));
    factors = LinearRopeFreqFactors(c->head_dim, factor);
  } else if (type == "llama3") {
    Llama3RopeScaling l3;
    TANDEM_ASSIGN_OR_RETURN(l3.factor, FloatField(rs, "factor", 0.f));
    TANDEM_ASSIGN_OR_RETURN(l3.low_freq_factor, FloatField(rs, "low_freq_factor", 0.f));
    TANDEM_ASSIGN_OR_RETURN(l3.high_freq_factor, FloatField(rs, "high_freq_factor", 0.f));
    TANDEM_ASSIGN_OR_RETURN(l3.original_max_position,
                            Int32Field(rs, "original_max_position_embeddings", std::nullopt));
    factors = Llama3RopeFreqFactors(c->head_dim, c->rope_theta, l3);
  } else if (type == "yarn") {
    TANDEM_ASSIGN_OR_RETURN(YarnRope yarn, ReadHfYarn(rs, *c));
    factors = std::move(yarn.freq_factors);
    c->rope_mscale = yarn.mscale;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("config.json: rope_scaling.rope_type '", type,
                     "' is not supported (supported: default, linear, llama3, yarn)"));
  }
  if (!factors.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", factors.status().message()));
  }
  c->rope_freq_factors = std::move(factors).value();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaConfig> ParseHfLlamaConfig(absl::string_view config_json) {
  TANDEM_ASSIGN_OR_RETURN(const nlohmann::json s, ParseJsonObject(config_json, "config.json"));
  LlamaConfig c;
  c.architecture = "llama";
  if (const auto* v = FindField(s, "model_type"); v != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(const std::string type, JsonString(*v, "config.json: model_type"));
    if (type != "llama" && type != "mistral" && type != "qwen2" && type != "qwen3" &&
        type != "phi3") {
      return absl::UnimplementedError(
          absl::StrCat("config.json: model_type '", type,
                       "' is not supported (supported: llama, mistral, qwen2, qwen3, phi3)"));
    }
    c.architecture = type == "mistral" ? "llama" : type;
  }
  if (const auto* v = FindField(s, "hidden_act"); v != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(const std::string act, JsonString(*v, "config.json: hidden_act"));
    if (act != "silu") {
      return absl::UnimplementedError(
          absl::StrCat("config.json: hidden_act '", act, "' is not supported (only 'silu')"));
    }
  }
  TANDEM_ASSIGN_OR_RETURN(c.vocab_size, Int32Field(s, "vocab_size", std::nullopt));
  TANDEM_ASSIGN_OR_RETURN(c.hidden_size, Int32Field(s, "hidden_size", std::nullopt));
  TANDEM_ASSIGN_OR_RETURN(c.intermediate_size, Int32Field(s, "intermediate_size", std::nullopt));
  TANDEM_ASSIGN_OR_RETURN(c.num_layers, Int32Field(s, "num_hidden_layers", std::nullopt));
  TANDEM_ASSIGN_OR_RETURN(c.num_q_heads, Int32Field(s, "num_attention_heads", std::nullopt));
  TANDEM_ASSIGN_OR_RETURN(c.num_kv_heads, Int32Field(s, "num_key_value_heads", c.num_q_heads));
  if (FindField(s, "head_dim") == nullptr && c.hidden_size % c.num_q_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: hidden_size ", c.hidden_size,
                                                   " is not a multiple of num_attention_heads ",
                                                   c.num_q_heads));
  }
  TANDEM_ASSIGN_OR_RETURN(c.head_dim, Int32Field(s, "head_dim", c.hidden_size / c.num_q_heads));
  TANDEM_ASSIGN_OR_RETURN(c.max_context, Int32Field(s, "max_position_embeddings", 2048));
  TANDEM_ASSIGN_OR_RETURN(c.rope_theta, FloatField(s, "rope_theta", 10000.f));
  TANDEM_ASSIGN_OR_RETURN(c.rms_norm_eps, FloatField(s, "rms_norm_eps", 1e-6f));
  TANDEM_ASSIGN_OR_RETURN(c.tied_embeddings, BoolField(s, "tie_word_embeddings"));
  TANDEM_ASSIGN_OR_RETURN(c.has_qkv_bias, BoolField(s, "attention_bias"));
  if (c.architecture == "qwen2") c.has_qkv_bias = true;  // Qwen2's q/k/v_proj always have bias
  c.has_qk_norm = c.architecture == "qwen3";
  c.fused_qkv_gate_up = c.architecture == "phi3";  // qkv_proj, gate_up_proj
  c.rope_style = RopeStyle::kRotateHalf;
  TANDEM_RETURN_IF_ERROR(RefuseSlidingWindow(s, c));
  TANDEM_RETURN_IF_ERROR(ReadRopeScaling(s, &c));
  TANDEM_RETURN_IF_ERROR(ValidateLlamaConfig(c));
  return c;
}

absl::StatusOr<std::unique_ptr<HfCheckpoint>> HfCheckpoint::Open(const std::string& dir) {
  std::unique_ptr<HfCheckpoint> ck(new HfCheckpoint());
  ck->dir_ = dir;
  TANDEM_ASSIGN_OR_RETURN(ck->config_json_, ReadFileToString(dir + "/config.json", kMaxJsonBytes));
  absl::StatusOr<LlamaConfig> config = ParseHfLlamaConfig(ck->config_json_);
  if (!config.ok()) {
    return absl::Status(config.status().code(), absl::StrCat(dir, ": ", config.status().message()));
  }
  ck->config_ = std::move(*config);
  const std::string trimmed = dir.substr(0, dir.find_last_not_of('/') + 1);
  ck->config_.name = trimmed.substr(trimmed.find_last_of('/') + 1);
  TANDEM_RETURN_IF_ERROR(ck->OpenShards());
  return ck;
}

absl::Status HfCheckpoint::OpenShards() {
  const std::string single = dir_ + "/model.safetensors";
  const std::string index_path = dir_ + "/model.safetensors.index.json";
  absl::btree_set<std::string> files;
  nlohmann::json weight_map;
  if (PathExists(index_path)) {
    TANDEM_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(index_path, kMaxJsonBytes));
    TANDEM_ASSIGN_OR_RETURN(const nlohmann::json index, ParseJsonObject(text, index_path));
    const nlohmann::json* map = FindField(index, "weight_map");
    if (map == nullptr || !map->is_object()) {
      return absl::InvalidArgumentError(index_path + ": weight_map is missing or not an object");
    }
    weight_map = *map;
    for (const auto& [tensor, file] : weight_map.items()) {
      TANDEM_ASSIGN_OR_RETURN(const std::string name,
                              JsonString(file, index_path + ": weight_map entry"));
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": shard name '", name, "' must be a plain file name"));
      }
      files.insert(name);
    }
  } else if (PathExists(single)) {
    files.insert("model.safetensors");
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": neither model.safetensors nor model.safetensors.index.json"));
  }
  for (const std::string& file : files) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> shard,
                            SafetensorsFile::Open(dir_ + "/" + file));
    for (const SafetensorsTensor& t : shard->tensors()) {
      if (!shard_of_.emplace(t.name, shards_.size()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir_, ": tensor '", t.name, "' appears in more than one shard"));
      }
    }
    shards_.push_back(std::move(shard));
  }
  for (const auto& [tensor, file] : weight_map.items()) {
    const SafetensorsFile* shard = ShardOf(tensor);
    if (shard == nullptr || shard->path() != dir_ + "/" + file.get<std::string>()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": tensor '", tensor,
                                                     "' is not in its listed shard '",
                                                     file.get<std::string>(), "'"));
    }
  }
  return absl::OkStatus();
}

const SafetensorsFile* HfCheckpoint::ShardOf(absl::string_view name) const {
  const auto it = shard_of_.find(name);
  return it == shard_of_.end() ? nullptr : shards_[it->second].get();
}

absl::StatusOr<LlamaWeights> HfCheckpoint::LoadWeights() const {
  LlamaWeights w;
  w.config = config_;
  TANDEM_RETURN_IF_ERROR(CheckLayersFitTensors(w.config, shard_of_.size(), dir_));
  const std::vector<LlamaTensorSlot> plan = PlanLlamaTensors(w.config, &w);
  std::vector<DequantJob> jobs;
  for (const LlamaTensorSlot& slot : plan) {
    const std::string name = HfTensorName(slot.role, slot.layer);
    const SafetensorsFile* shard = ShardOf(name);
    if (shard == nullptr) {
      return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor '", name, "'"));
    }
    const SafetensorsTensor& t = *shard->Find(name);
    if (t.shape != slot.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(shard->path(), ": tensor '", name, "' has shape ", ShapeString(t.shape),
                       ", expected ", ShapeString(slot.shape), " from config.json"));
    }
    TANDEM_ASSIGN_OR_RETURN(const GgmlType type, shard->ConvertibleType(t));
    jobs.push_back({type, shard->TensorData(t), slot.shape, slot.dst});
  }
  TANDEM_RETURN_IF_ERROR(DequantizeAll(jobs));
  TANDEM_RETURN_IF_ERROR(SplitFusedLlamaTensors(&w));
  return w;
}

}  // namespace tandem
