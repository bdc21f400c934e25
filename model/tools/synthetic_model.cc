#include "model/tools/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/content_hash.h"
#include "model/format/llama_tensor_plan.h"
#include "model/format/rope_scaling.h"
#include "model/tools/synthetic_vocab.h"

namespace tandem {
namespace {

LlamaConfig ConfigOf(const SyntheticModelOptions& o) {
  LlamaConfig c;
  c.name = "tandem-synthetic";
  c.architecture = o.arch;
  c.vocab_size = o.vocab;
  c.hidden_size = o.hidden;
  c.intermediate_size = o.intermediate;
  c.num_layers = o.layers;
  c.num_q_heads = o.q_heads;
  c.num_kv_heads = o.kv_heads;
  c.head_dim = o.head_dim;
  c.max_context = o.context;
  c.rope_theta = o.rope_theta;
  c.rms_norm_eps = o.rms_norm_eps;
  c.tied_embeddings = o.tied_embeddings;
  c.has_qkv_bias = o.qkv_bias || o.arch == "qwen2";
  c.has_qk_norm = o.arch == "qwen3";
  c.fused_qkv_gate_up = o.arch == "phi3";
  return c;
}

// Uniform values with the given mean and standard deviation from a generator seeded by
// (seed, name). mt19937_64's output sequence is fixed by the standard and the conversion to
// float is ours, so the values are identical everywhere (std::*_distribution are not).
std::vector<float> RandomValues(uint64_t seed, const std::string& name, int64_t n, float mean,
                                float stddev) {
  ContentHash h;
  h.AddU64(seed);
  h.Add(name);
  std::mt19937_64 gen(h.value());
  const float half_width = stddev * std::sqrt(3.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;  // [0, 1)
    x = mean + half_width * static_cast<float>(2.0 * u - 1.0);
  }
  return v;
}

// (mean, stddev) of a tensor's initialisation; see the header for why.
std::pair<float, float> InitOf(LlamaTensorRole role, const std::vector<int64_t>& shape,
                               int hidden) {
  switch (role) {
    case LlamaTensorRole::kTokenEmbedding:
      return {0.f, 1.f};
    case LlamaTensorRole::kOutput:
      return {0.f, 2.f / std::sqrt(static_cast<float>(hidden))};
    case LlamaTensorRole::kOutputNorm:
    case LlamaTensorRole::kAttnNorm:
    case LlamaTensorRole::kFfnNorm:
    case LlamaTensorRole::kQNorm:
    case LlamaTensorRole::kKNorm:
      return {1.f, 0.1f / std::sqrt(3.f)};
    case LlamaTensorRole::kBq:
    case LlamaTensorRole::kBk:
    case LlamaTensorRole::kBv:
      return {0.f, 0.1f};
    default:
      return {0.f, 1.f / std::sqrt(static_cast<float>(shape.back()))};
  }
}

int OriginalContext(const SyntheticModelOptions& o) {
  if (o.rope_original_context > 0) return o.rope_original_context;
  return std::max(1, static_cast<int>(static_cast<float>(o.context) / o.rope_scaling_factor));
}

}  // namespace

absl::Status ValidateSyntheticOptions(const SyntheticModelOptions& o) {
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && o.arch != "phi3") {
    return absl::InvalidArgumentError(
        absl::StrCat("--arch '", o.arch, "' is not one of llama, qwen2, qwen3, phi3"));
  }
  // llama.cpp's phi3 has an attention output of [hidden][hidden]: Q's width must be hidden.
  if (o.arch == "phi3" && o.q_heads * o.head_dim != o.hidden) {
    return absl::InvalidArgumentError(absl::StrCat("--arch phi3 needs q-heads * head-dim (",
                                                   o.q_heads * o.head_dim, ") = hidden (", o.hidden,
                                                   ")"));
  }
  if (o.rope_scaling != SyntheticRopeScaling::kNone && !(o.rope_scaling_factor > 0.f)) {
    return absl::InvalidArgumentError("--rope-scaling factor must be positive");
  }
  if (o.rope_original_context < 0) {
    return absl::InvalidArgumentError("--rope-original-context must not be negative");
  }
  const std::pair<const char*, int> sizes[] = {
      {"layers", o.layers},     {"hidden", o.hidden},     {"q-heads", o.q_heads},
      {"kv-heads", o.kv_heads}, {"head-dim", o.head_dim}, {"intermediate", o.intermediate},
      {"context", o.context}};
  for (const auto& [name, v] : sizes) {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat("--", name, " must be positive"));
  }
  if (o.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--head-dim ", o.head_dim, " must be even"));
  }
  if (o.q_heads % o.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--q-heads ", o.q_heads, " must be a multiple of --kv-heads ", o.kv_heads));
  }
  if (o.vocab < kSyntheticMinVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab must be at least ", kSyntheticMinVocab, " (3 specials + 256 bytes)"));
  }
  if (o.dtype != GgmlType::kF32 && o.dtype != GgmlType::kF16 && o.dtype != GgmlType::kQ8_0) {
    return absl::InvalidArgumentError("--dtype must be f32, f16 or q8_0");
  }
  if (o.dtype == GgmlType::kQ8_0 &&
      (o.hidden % 32 != 0 || o.intermediate % 32 != 0 || (o.q_heads * o.head_dim) % 32 != 0)) {
    return absl::InvalidArgumentError(
        "--dtype q8_0 needs hidden, intermediate and q-heads*head-dim to be multiples of 32");
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufWriter> BuildSyntheticModel(const SyntheticModelOptions& o) {
  TANDEM_RETURN_IF_ERROR(ValidateSyntheticOptions(o));
  TANDEM_ASSIGN_OR_RETURN(SyntheticVocab vocab, BuildSyntheticVocab(o.vocab));
  const LlamaConfig c = ConfigOf(o);
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String(o.arch));
  w.Set("general.name", GgufValue::String(c.name));
  w.Set("tandem.synthetic.seed", GgufValue::Uint64(o.seed));
  const std::string p = o.arch + ".";
  const auto u32 = [](int v) { return GgufValue::Uint32(static_cast<uint32_t>(v)); };
  w.Set(p + "context_length", u32(o.context));
  w.Set(p + "embedding_length", u32(o.hidden));
  w.Set(p + "block_count", u32(o.layers));
  w.Set(p + "feed_forward_length", u32(o.intermediate));
  w.Set(p + "attention.head_count", u32(o.q_heads));
  w.Set(p + "attention.head_count_kv", u32(o.kv_heads));
  w.Set(p + "attention.key_length", u32(o.head_dim));
  w.Set(p + "attention.value_length", u32(o.head_dim));
  w.Set(p + "rope.dimension_count", u32(o.head_dim));
  w.Set(p + "rope.freq_base", GgufValue::Float32(o.rope_theta));
  w.Set(p + "attention.layer_norm_rms_epsilon", GgufValue::Float32(o.rms_norm_eps));
  w.Set(p + "vocab_size", u32(o.vocab));
  if (o.rope_scaling == SyntheticRopeScaling::kLinear) {
    w.Set(p + "rope.scaling.type", GgufValue::String("linear"));
    w.Set(p + "rope.scaling.factor", GgufValue::Float32(o.rope_scaling_factor));
  } else if (o.rope_scaling == SyntheticRopeScaling::kYarn) {
    w.Set(p + "rope.scaling.type", GgufValue::String("yarn"));
    w.Set(p + "rope.scaling.factor", GgufValue::Float32(o.rope_scaling_factor));
    w.Set(p + "rope.scaling.original_context_length", u32(OriginalContext(o)));
  } else if (o.rope_scaling == SyntheticRopeScaling::kLlama3) {
    Llama3RopeScaling l3;
    l3.factor = o.rope_scaling_factor;
    l3.original_max_position = OriginalContext(o);
    TANDEM_ASSIGN_OR_RETURN(const std::vector<float> factors,
                            Llama3RopeFreqFactors(o.head_dim, o.rope_theta, l3));
    TANDEM_RETURN_IF_ERROR(w.AddF32Tensor(
        "rope_freqs.weight", {static_cast<int64_t>(factors.size())}, factors, GgmlType::kF32));
  }
  w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w.Set("tokenizer.ggml.pre", GgufValue::String("smollm"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray(vocab.tokens));
  std::vector<int32_t> types;
  for (const TokenKind k : vocab.kinds) types.push_back(static_cast<int32_t>(k));
  w.Set("tokenizer.ggml.token_type", GgufValue::Int32Array(types));
  std::vector<std::string> merges;
  for (const auto& [left, right] : vocab.merges) merges.push_back(left + " " + right);
  w.Set("tokenizer.ggml.merges", GgufValue::StringArray(std::move(merges)));
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::Uint32(1));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::Uint32(2));
  w.Set("tokenizer.ggml.padding_token_id", GgufValue::Uint32(2));
  w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));

  LlamaWeights unused;
  for (const LlamaTensorSlot& slot : PlanLlamaTensors(c, &unused)) {
    const std::string name = GgufTensorName(slot.role, slot.layer);
    int64_t n = 1;
    for (const int64_t d : slot.shape) n *= d;
    const auto [mean, stddev] = InitOf(slot.role, slot.shape, o.hidden);
    const std::vector<float> values = RandomValues(o.seed, name, n, mean, stddev);
    const GgmlType type = slot.shape.size() == 1 ? GgmlType::kF32 : o.dtype;
    TANDEM_RETURN_IF_ERROR(w.AddF32Tensor(name, slot.shape, values, type));
  }
  return w;
}

absl::Status WriteSyntheticModel(const SyntheticModelOptions& options, const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(const GgufWriter w, BuildSyntheticModel(options));
  return w.WriteFile(path);
}

}  // namespace tandem
