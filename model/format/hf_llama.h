// Llama weights from a Hugging Face checkpoint directory: config.json plus model.safetensors,
// or shards listed in model.safetensors.index.json ("weight_map": tensor -> shard file).
// Tensors F32/F16/BF16 are converted to f32; HF matrices are already [out][in]. rope_style is
// kRotateHalf (HF's q/k layout); no permutation is applied.
//
// config.json: model_type "llama", "mistral" (architecture llama), "qwen2" (QKV biases always)
// or "qwen3" (self_attn.q_norm/k_norm per-head RMSNorm); hidden_act "silu" (when present);
// rope_scaling null/absent or rope_type default, linear {factor}, llama3 {factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings} or yarn {factor,
// original_max_position_embeddings, beta_fast, beta_slow, attention_factor} (model/format/
// rope_scaling.h; others such as longrope/su/dynamic refused by value); sliding-window attention
// refused (Qwen: use_sliding_window true; others: sliding_window shorter than
// max_position_embeddings); vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads required; num_key_value_heads (default num_attention_heads), head_dim
// (default hidden/heads), max_position_embeddings (default 2048), rope_theta (10000), rms_norm_eps
// (1e-6), tie_word_embeddings (false), attention_bias (false) optional.
//
// Errors: NotFound (missing file/tensor), InvalidArgument (malformed JSON or safetensors,
// shape mismatch), Unimplemented (other model types, rope scaling, unsupported dtypes).
// An HfCheckpoint is immutable after Open; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/format/llama_weights.h"
#include "model/format/safetensors_file.h"

namespace tandem {

// config.json text -> LlamaConfig (name is left empty).
[[nodiscard]] absl::StatusOr<LlamaConfig> ParseHfLlamaConfig(absl::string_view config_json);

class HfCheckpoint {
 public:
  static absl::StatusOr<std::unique_ptr<HfCheckpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& config_json() const { return config_json_; }
  const LlamaConfig& config() const { return config_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

  // The shard holding `name`, or null.
  const SafetensorsFile* ShardOf(absl::string_view name) const;

  // Checks every tensor's presence and shape first, then converts them.
  absl::StatusOr<LlamaWeights> LoadWeights() const;

 private:
  HfCheckpoint() = default;
  absl::Status OpenShards();

  std::string dir_;
  std::string config_json_;
  LlamaConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  absl::flat_hash_map<std::string, size_t> shard_of_;
};

}  // namespace tandem
