#include "model/format/gguf_llama.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/dequant.h"
#include "model/format/rope_scaling.h"
#include "model/tools/synthetic_model.h"
#include "tests/model/format/gguf_test_util.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using ::tandem::testing::EditGguf;
using ::tandem::testing::KeepKey;
using ::tandem::testing::KeepTensor;

std::string Synthetic(const SyntheticModelOptions& o = {}) {
  absl::StatusOr<GgufWriter> w = BuildSyntheticModel(o);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? w->Serialize() : "";
}

absl::StatusOr<LlamaWeights> Load(std::string bytes) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(std::move(bytes), "m.gguf");
  if (!f.ok()) return f.status();
  return LoadGgufLlama(**f);
}

TEST(GgufLlamaTest, LoadsTheSyntheticModel) {
  SyntheticModelOptions o;
  o.layers = 3;
  o.hidden = 64;
  o.head_dim = 16;  // q_heads·head_dim = 128 != hidden: key_length is honoured
  absl::StatusOr<LlamaWeights> w = Load(Synthetic(o));
  ASSERT_OK(w);
  const LlamaConfig& c = w->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.name, "tandem-synthetic");
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_q_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.intermediate_size, 256);
  EXPECT_EQ(c.vocab_size, 320);
  EXPECT_EQ(c.max_context, 2048);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.has_qkv_bias);
  EXPECT_EQ(w->token_embedding.shape, (std::vector<int64_t>{320, 64}));
  EXPECT_EQ(w->output.shape, (std::vector<int64_t>{320, 64}));
  EXPECT_EQ(&w->lm_head(), &w->output);
  ASSERT_EQ(w->layers.size(), 3u);
  const LlamaLayerWeights& l = w->layers[2];
  EXPECT_EQ(l.wq.shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(l.wk.shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(l.wv.shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(l.wo.shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(l.w_gate.shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(l.w_down.shape, (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(l.attn_norm.numel(), 64);
  EXPECT_TRUE(l.bq.empty());
  // Norm weights are 1 ± 0.1; projection weights are uniform with std 1/sqrt(fan_in).
  for (const float x : l.ffn_norm.data) EXPECT_NEAR(x, 1.f, 0.1f);
  double sq = 0;
  for (const float x : l.wq.data) sq += x * x;
  EXPECT_NEAR(std::sqrt(sq / l.wq.numel()), 1.0 / 8.0, 0.01);
}

TEST(GgufLlamaTest, TiedAndBiasVariants) {
  SyntheticModelOptions o;
  o.tied_embeddings = true;
  o.qkv_bias = true;
  absl::StatusOr<LlamaWeights> w = Load(Synthetic(o));
  ASSERT_OK(w);
  EXPECT_TRUE(w->config.tied_embeddings);
  EXPECT_TRUE(w->output.empty());
  EXPECT_EQ(&w->lm_head(), &w->token_embedding);
  EXPECT_TRUE(w->config.has_qkv_bias);
  EXPECT_EQ(w->layers[1].bq.shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(w->layers[1].bk.shape, (std::vector<int64_t>{32}));
}

TEST(GgufLlamaTest, QuantisedDtypesStayCloseToF32) {
  SyntheticModelOptions o;
  absl::StatusOr<LlamaWeights> f32 = Load(Synthetic(o));
  o.dtype = GgmlType::kQ8_0;
  absl::StatusOr<LlamaWeights> q8 = Load(Synthetic(o));
  o.dtype = GgmlType::kF16;
  absl::StatusOr<LlamaWeights> f16 = Load(Synthetic(o));
  ASSERT_OK(f32);
  ASSERT_OK(q8);
  ASSERT_OK(f16);
  const std::vector<float>& a = f32->layers[0].w_up.data;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(q8->layers[0].w_up.data[i], a[i], 0.01f) << i;
    ASSERT_NEAR(f16->layers[0].w_up.data[i], a[i], 1e-3f) << i;
  }
  EXPECT_EQ(q8->layers[0].attn_norm.data, f32->layers[0].attn_norm.data);  // norms stay F32
}

TEST(GgufLlamaTest, SeedsAreDeterministicAndDistinct) {
  SyntheticModelOptions o;
  EXPECT_EQ(Synthetic(o), Synthetic(o));
  SyntheticModelOptions other = o;
  other.seed = 2;
  EXPECT_NE(Synthetic(o), Synthetic(other));
}

TEST(GgufLlamaTest, MissingTensor) {
  const std::string b = EditGguf(
      Synthetic(), KeepKey,
      [](const std::string& name, auto&, auto&, auto&) { return name != "blk.1.ffn_up.weight"; });
  EXPECT_STATUS_IS(Load(b), absl::StatusCode::kNotFound,
                   "m.gguf: missing tensor 'blk.1.ffn_up.weight'");
}

TEST(GgufLlamaTest, ShapeMismatch) {
  const std::string b =
      EditGguf(Synthetic(), KeepKey,
               [](const std::string& name, std::vector<int64_t>& shape, GgmlType&, std::string&) {
                 if (name == "blk.1.attn_k.weight") shape = {64, 64};  // same element count
                 return true;
               });
  EXPECT_STATUS_IS(Load(b), absl::StatusCode::kInvalidArgument,
                   "tensor 'blk.1.attn_k.weight' has shape [64, 64], expected [32, 128]");
}

TEST(GgufLlamaTest, UndequantisableType) {
  const std::string b = EditGguf(
      Synthetic(), KeepKey,
      [](const std::string& name, std::vector<int64_t>& shape, GgmlType& type, std::string& raw) {
        if (name == "blk.0.attn_q.weight") {
          type = GgmlType::kIQ4_NL;
          raw.assign(static_cast<size_t>(shape[0] * shape[1] / 32 * 18), '\0');
        }
        return true;
      });
  EXPECT_STATUS_IS(Load(b), absl::StatusCode::kUnimplemented,
                   "tensor 'blk.0.attn_q.weight' has type IQ4_NL, which Tandem cannot dequantise");
}

TEST(GgufLlamaTest, LoadsQwen2AndQwen3) {
  SyntheticModelOptions o;
  o.arch = "qwen2";
  absl::StatusOr<LlamaWeights> w = Load(Synthetic(o));
  ASSERT_OK(w);
  EXPECT_EQ(w->config.architecture, "qwen2");
  EXPECT_EQ(w->config.rope_style, RopeStyle::kRotateHalf);  // ggml's NeoX mode for qwen2
  EXPECT_TRUE(w->config.has_qkv_bias);
  EXPECT_FALSE(w->config.has_qk_norm);
  EXPECT_EQ(w->layers[1].bk.shape, (std::vector<int64_t>{32}));
  EXPECT_TRUE(w->layers[1].q_norm.empty());

  o.arch = "qwen3";
  o.head_dim = 32;  // heads·head_dim (256) ≠ hidden (128), as in Qwen3 checkpoints
  w = Load(Synthetic(o));
  ASSERT_OK(w);
  EXPECT_EQ(w->config.architecture, "qwen3");
  EXPECT_EQ(w->config.rope_style, RopeStyle::kRotateHalf);
  EXPECT_FALSE(w->config.has_qkv_bias);
  EXPECT_TRUE(w->config.has_qk_norm);
  EXPECT_EQ(w->config.head_dim, 32);
  EXPECT_EQ(w->layers[0].wq.shape, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(w->layers[1].q_norm.shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(w->layers[1].k_norm.shape, (std::vector<int64_t>{32}));
  for (const float x : w->layers[1].k_norm.data) EXPECT_NEAR(x, 1.f, 0.1f);
  // A qwen3 file without its Q/K norms is incomplete.
  const std::string no_norm =
      EditGguf(Synthetic(o), KeepKey,
               [](const std::string& name, std::vector<int64_t>&, GgmlType&, std::string&) {
                 return name != "blk.0.attn_k_norm.weight";
               });
  EXPECT_STATUS_IS(Load(no_norm), absl::StatusCode::kNotFound,
                   "missing tensor 'blk.0.attn_k_norm.weight'");
}

// phi3: attn_qkv and ffn_up (gate rows, then up rows) are split by rows at load, as f32 values
// and, kept quantised, as the same rows' blocks; LongRoPE and a short sliding window are refused.
TEST(GgufLlamaTest, LoadsPhi3SplittingItsFusedMatrices) {
  SyntheticModelOptions o;
  o.arch = "phi3";
  o.dtype = GgmlType::kQ8_0;
  const std::string bytes = Synthetic(o);
  absl::StatusOr<LlamaWeights> f32 = Load(bytes);
  ASSERT_OK(f32);
  EXPECT_EQ(f32->config.architecture, "phi3");
  EXPECT_EQ(f32->config.rope_style, RopeStyle::kRotateHalf);
  EXPECT_TRUE(f32->config.fused_qkv_gate_up);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes, "m.gguf");
  ASSERT_OK(file);
  absl::StatusOr<LlamaWeights> quantised = LoadGgufLlama(**file, /*keep_quantized=*/true);
  ASSERT_OK(quantised);
  const GgufTensorInfo* qkv = (*file)->FindTensor("blk.1.attn_qkv.weight");
  const GgufTensorInfo* gate_up = (*file)->FindTensor("blk.1.ffn_up.weight");
  ASSERT_NE(qkv, nullptr);
  ASSERT_NE(gate_up, nullptr);
  const absl::Span<const uint8_t> qkv_bytes = (*file)->TensorData(*qkv);
  const absl::Span<const uint8_t> gate_up_bytes = (*file)->TensorData(*gate_up);
  const int64_t row = 128 / 32 * 34;  // one Q8_0 row of hidden = 128
  const LlamaLayerWeights& q = quantised->layers[1];
  const LlamaLayerWeights& d = f32->layers[1];
  // Q 8·16 = 128 rows, K and V 2·16 = 32 each; gate and up 256 each.
  const std::pair<const Tensor*, const Tensor*> parts[] = {
      {&q.wq, &d.wq}, {&q.wk, &d.wk}, {&q.wv, &d.wv}, {&q.w_gate, &d.w_gate}, {&q.w_up, &d.w_up}};
  const int64_t rows[] = {128, 32, 32, 256, 256};
  const int64_t first[] = {0, 128, 160, 0, 256};
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE(i);
    const auto [kept, dense] = parts[i];
    EXPECT_EQ(kept->type, GgmlType::kQ8_0);
    EXPECT_EQ(kept->shape, (std::vector<int64_t>{rows[i], 128}));
    EXPECT_EQ(dense->shape, kept->shape);
    const absl::Span<const uint8_t> fused = i < 3 ? qkv_bytes : gate_up_bytes;
    ASSERT_EQ(kept->blocks.size(), static_cast<size_t>(rows[i] * row));
    EXPECT_TRUE(
        std::equal(kept->blocks.begin(), kept->blocks.end(), fused.begin() + first[i] * row));
    std::vector<float> values(static_cast<size_t>(rows[i] * 128));
    ASSERT_OK(Dequantize(kept->type, kept->blocks, absl::MakeSpan(values)));
    EXPECT_EQ(values, dense->data);
  }

  // The 128k models' LongRoPE factors are refused by name.
  absl::StatusOr<GgufWriter> long_rope = BuildSyntheticModel(o);
  ASSERT_OK(long_rope);
  ASSERT_OK(long_rope->AddF32Tensor("rope_factors_long.weight", {8}, std::vector<float>(8, 1.f),
                                    GgmlType::kF32));
  EXPECT_STATUS_IS(Load(long_rope->Serialize()), absl::StatusCode::kUnimplemented,
                   "tensor 'rope_factors_long.weight' (Phi-3 LongRoPE / su RoPE scaling)");
  // A sliding window shorter than the context (2048) is refused; one as long is no window.
  for (const uint32_t window : {2047u, 2048u}) {
    absl::StatusOr<GgufWriter> swa = BuildSyntheticModel(o);
    ASSERT_OK(swa);
    swa->Set("phi3.attention.sliding_window", GgufValue::Uint32(window));
    if (window < 2048) {
      EXPECT_STATUS_IS(Load(swa->Serialize()), absl::StatusCode::kUnimplemented,
                       "phi3.attention.sliding_window = 2047 is not supported");
    } else {
      EXPECT_TRUE(Load(swa->Serialize()).ok());
    }
  }
}

// Llama 3.1's published rope_scaling (factor 8, low 1, high 4, original 8192, theta 500000,
// head_dim 128): divisors from transformers' _compute_llama3_parameters, computed apart.
TEST(GgufLlamaTest, Llama3RopeFactorsFollowTheReferenceFormula) {
  absl::StatusOr<std::vector<float>> f =
      Llama3RopeFreqFactors(128, 500000.f, Llama3RopeScaling{8.f, 1.f, 4.f, 8192});
  ASSERT_OK(f);
  ASSERT_EQ(f->size(), 64u);
  EXPECT_FLOAT_EQ((*f)[0], 1.f);
  EXPECT_FLOAT_EQ((*f)[28], 1.f);
  EXPECT_NEAR((*f)[30], 1.5534146, 1e-5);
  EXPECT_NEAR((*f)[33], 3.6842525, 1e-5);
  EXPECT_FLOAT_EQ((*f)[35], 8.f);
  EXPECT_FLOAT_EQ((*f)[63], 8.f);
  EXPECT_STATUS_IS(Llama3RopeFreqFactors(128, 500000.f, Llama3RopeScaling{8.f, 4.f, 1.f, 8192}),
                   absl::StatusCode::kInvalidArgument,
                   "low_freq_factor 4 and high_freq_factor 1 must satisfy 0 < low < high");
}

// YaRN as ggml applies it (and transformers' _compute_yarn_parameters computes it) for a
// Qwen2.5-style rope_scaling (factor 4, original 32768, theta 1e6, head_dim 128): correction dims
// 23 and 40, pairs below 23 extrapolated (divisor 1), above 40 interpolated (divisor 4), a linear
// ramp of the blend between; magnitude 1 + 0.1 ln 4. Expected values computed apart (Python).
TEST(GgufLlamaTest, YarnRopeFollowsTheReferenceFormula) {
  absl::StatusOr<YarnRope> y = YarnRopeParams(128, 1e6f, YarnRopeScaling{4.f, 32768});
  ASSERT_OK(y);
  ASSERT_EQ(y->freq_factors.size(), 64u);
  EXPECT_FLOAT_EQ(y->freq_factors[0], 1.f);
  EXPECT_FLOAT_EQ(y->freq_factors[23], 1.f);
  EXPECT_NEAR(y->freq_factors[24], 1.0461538, 1e-6);
  EXPECT_NEAR(y->freq_factors[31], 1.5454545, 1e-6);
  EXPECT_NEAR(y->freq_factors[39], 3.4, 1e-6);
  EXPECT_FLOAT_EQ(y->freq_factors[40], 4.f);
  EXPECT_FLOAT_EQ(y->freq_factors[63], 4.f);
  EXPECT_NEAR(y->mscale, 1.1386294, 1e-6);
  // ext_factor 0: plain interpolation, and only attn_factor is left of the magnitude.
  YarnRopeScaling plain{4.f, 32768};
  plain.ext_factor = 0.f;
  plain.attn_factor = 0.5f;
  y = YarnRopeParams(128, 1e6f, plain);
  ASSERT_OK(y);
  EXPECT_EQ(y->freq_factors, std::vector<float>(64, 4.f));
  EXPECT_FLOAT_EQ(y->mscale, 0.5f);
  EXPECT_STATUS_IS(YarnRopeParams(128, 1e6f, YarnRopeScaling{0.f, 32768}),
                   absl::StatusCode::kInvalidArgument, "yarn factor is 0");
  EXPECT_STATUS_IS(YarnRopeParams(128, 1e6f, YarnRopeScaling{4.f, 0}),
                   absl::StatusCode::kInvalidArgument, "yarn original context length is 0");
}

TEST(GgufLlamaTest, RopeScalingBecomesFrequencyDivisors) {
  SyntheticModelOptions o;
  o.rope_scaling = SyntheticRopeScaling::kLlama3;
  o.rope_scaling_factor = 8.f;
  absl::StatusOr<LlamaWeights> w = Load(Synthetic(o));
  ASSERT_OK(w);
  absl::StatusOr<std::vector<float>> want =
      Llama3RopeFreqFactors(16, 10000.f, Llama3RopeScaling{8.f, 1.f, 4.f, 2048 / 8});
  ASSERT_OK(want);
  EXPECT_EQ(w->config.rope_freq_factors, *want);  // read back from rope_freqs.weight
  EXPECT_FLOAT_EQ(w->config.rope_freq_factors.front(), 1.f);
  EXPECT_FLOAT_EQ(w->config.rope_freq_factors.back(), 8.f);

  o.rope_scaling = SyntheticRopeScaling::kLinear;
  o.rope_scaling_factor = 2.5f;
  w = Load(Synthetic(o));
  ASSERT_OK(w);
  EXPECT_EQ(w->config.rope_freq_factors, std::vector<float>(8, 2.5f));
  EXPECT_EQ(w->config.rope_mscale, 1.f);

  // YaRN, factor 4 over an original context of 32 (head_dim 16, theta 1e4): correction dims 0
  // and 2, so pair 0 extrapolates, pair 1 blends halfway, the rest interpolate.
  o.rope_scaling = SyntheticRopeScaling::kYarn;
  o.rope_scaling_factor = 4.f;
  o.rope_original_context = 32;
  w = Load(Synthetic(o));
  ASSERT_OK(w);
  ASSERT_EQ(w->config.rope_freq_factors.size(), 8u);
  EXPECT_FLOAT_EQ(w->config.rope_freq_factors[0], 1.f);
  EXPECT_FLOAT_EQ(w->config.rope_freq_factors[1], 1.6f);
  for (size_t i = 2; i < 8; ++i) EXPECT_FLOAT_EQ(w->config.rope_freq_factors[i], 4.f);
  EXPECT_NEAR(w->config.rope_mscale, 1.1386294, 1e-6);

  w = Load(Synthetic());
  ASSERT_OK(w);
  EXPECT_TRUE(w->config.rope_freq_factors.empty());
  EXPECT_EQ(w->config.rope_mscale, 1.f);
}

// What the forward does not implement is refused naming the key and its value.
TEST(GgufLlamaTest, UnsupportedFeaturesAreRefusedByName) {
  SyntheticModelOptions o;
  o.rope_scaling = SyntheticRopeScaling::kLinear;
  const std::string linear = Synthetic(o);
  const std::string longrope = EditGguf(
      linear,
      [](const std::string& key, GgufValue& v) {
        if (key == "llama.rope.scaling.type") v = GgufValue::String("longrope");
        return true;
      },
      KeepTensor);
  EXPECT_STATUS_IS(Load(longrope), absl::StatusCode::kUnimplemented,
                   "llama.rope.scaling.type 'longrope' is not supported");
  // YaRN keys llama.cpp ignores for these architectures: only its own values are accepted.
  o.rope_scaling = SyntheticRopeScaling::kYarn;
  o.rope_original_context = 32;
  auto yarn_with = [&](const std::string& key, float value) {
    absl::StatusOr<GgufWriter> w = BuildSyntheticModel(o);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return std::string();
    w->Set(key, GgufValue::Float32(value));
    return w->Serialize();
  };
  EXPECT_STATUS_IS(Load(yarn_with("llama.rope.scaling.yarn_beta_fast", 16.f)),
                   absl::StatusCode::kUnimplemented,
                   "llama.rope.scaling.yarn_beta_fast = 16 is not supported");
  EXPECT_STATUS_IS(Load(yarn_with("llama.rope.scaling.yarn_log_multiplier", 0.1f)),
                   absl::StatusCode::kUnimplemented,
                   "llama.rope.scaling.yarn_log_multiplier = 0.1 is not supported");
  EXPECT_STATUS_IS(Load(yarn_with("llama.rope.scaling.yarn_attn_factor", 1.5f)),
                   absl::StatusCode::kUnimplemented,
                   "llama.rope.scaling.yarn_attn_factor = 1.5 is not supported");
  EXPECT_TRUE(Load(yarn_with("llama.rope.scaling.yarn_beta_slow", 1.f)).ok());
  EXPECT_TRUE(Load(yarn_with("llama.rope.scaling.yarn_attn_factor", 1.1386294f)).ok());
  const std::string yarn_no_factor = EditGguf(
      Synthetic(o),
      [](const std::string& key, GgufValue&) { return key != "llama.rope.scaling.factor"; },
      KeepTensor);
  EXPECT_STATUS_IS(Load(yarn_no_factor), absl::StatusCode::kNotFound,
                   "rope.scaling.type is 'yarn' but llama.rope.scaling.factor is missing");
  o.rope_scaling = SyntheticRopeScaling::kLinear;
  o.rope_original_context = 0;
  const std::string no_factor = EditGguf(
      linear, [](const std::string& key, GgufValue&) { return key != "llama.rope.scaling.factor"; },
      KeepTensor);
  EXPECT_STATUS_IS(Load(no_factor), absl::StatusCode::kNotFound,
                   "llama.rope.scaling.factor is missing");
  o = SyntheticModelOptions{};
  o.arch = "qwen2";
  auto with_key = [&](const std::string& key, GgufValue value) {
    absl::StatusOr<GgufWriter> w = BuildSyntheticModel(o);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return std::string();
    w->Set(key, std::move(value));
    return w->Serialize();
  };
  // A window shorter than the context (2048) changes attention; one as long drops nothing.
  EXPECT_STATUS_IS(Load(with_key("qwen2.attention.sliding_window", GgufValue::Uint32(1024))),
                   absl::StatusCode::kUnimplemented,
                   "qwen2.attention.sliding_window = 1024 is not supported (sliding-window");
  EXPECT_TRUE(Load(with_key("qwen2.attention.sliding_window", GgufValue::Uint32(4096))).ok());
  EXPECT_STATUS_IS(Load(with_key("qwen2.expert_count", GgufValue::Uint32(8))),
                   absl::StatusCode::kUnimplemented,
                   "qwen2.expert_count = 8 is not supported (mixture of experts)");
  ASSERT_OK(Load(with_key("qwen2.expert_count", GgufValue::Uint32(0))));
  EXPECT_STATUS_IS(Load(with_key("qwen2.rope.dimension_count", GgufValue::Uint32(8))),
                   absl::StatusCode::kUnimplemented,
                   "qwen2.rope.dimension_count 8 differs from head_dim 16");
  // A rope_freqs.weight that is not head_dim/2 long.
  o.rope_scaling = SyntheticRopeScaling::kLlama3;
  const std::string bad_freqs = EditGguf(
      Synthetic(o), KeepKey,
      [](const std::string& name, std::vector<int64_t>& shape, GgmlType&, std::string& raw) {
        if (name == "rope_freqs.weight") {
          shape = {4};
          raw.resize(4 * sizeof(float));
        }
        return true;
      });
  EXPECT_STATUS_IS(Load(bad_freqs), absl::StatusCode::kInvalidArgument,
                   "tensor 'rope_freqs.weight' has shape [4], expected [8] (head_dim/2)");
  o = SyntheticModelOptions{};
  o.arch = "gemma";
  EXPECT_STATUS_IS(ValidateSyntheticOptions(o), absl::StatusCode::kInvalidArgument,
                   "--arch 'gemma' is not one of llama, qwen2, qwen3");
}

TEST(GgufLlamaTest, MetadataProblems) {
  const std::string good = Synthetic();
  auto edited = [&](const std::string& target, auto change) {
    return EditGguf(
        good, [&](const std::string& key, GgufValue& v) { return key != target || change(v); },
        KeepTensor);
  };
  EXPECT_STATUS_IS(Load(edited("llama.block_count", [](GgufValue&) { return false; })),
                   absl::StatusCode::kNotFound, "missing metadata key 'llama.block_count'");
  EXPECT_STATUS_IS(Load(edited("general.architecture",
                               [](GgufValue& v) {
                                 v = GgufValue::String("gpt2");
                                 return true;
                               })),
                   absl::StatusCode::kUnimplemented, "architecture 'gpt2' is not supported");
  EXPECT_STATUS_IS(Load(edited("llama.attention.head_count",
                               [](GgufValue& v) {
                                 v = GgufValue::Float32(8);
                                 return true;
                               })),
                   absl::StatusCode::kInvalidArgument,
                   "metadata key 'llama.attention.head_count' has type FLOAT32");
  EXPECT_STATUS_IS(Load(edited("llama.attention.head_count_kv",
                               [](GgufValue& v) {
                                 v = GgufValue::Uint32(3);
                                 return true;
                               })),
                   absl::StatusCode::kInvalidArgument,
                   "num_q_heads 8 is not a multiple of num_kv_heads 3");
  EXPECT_STATUS_IS(Load(edited("llama.rope.dimension_count",
                               [](GgufValue& v) {
                                 v = GgufValue::Uint32(8);
                                 return true;
                               })),
                   absl::StatusCode::kUnimplemented,
                   "llama.rope.dimension_count 8 differs from head_dim 16");
  EXPECT_STATUS_IS(Load(edited("llama.block_count",
                               [](GgufValue& v) {
                                 v = GgufValue::Uint32(0);
                                 return true;
                               })),
                   absl::StatusCode::kInvalidArgument, "'llama.block_count' is 0");
  EXPECT_STATUS_IS(Load(edited("tokenizer.ggml.tokens",
                               [](GgufValue& v) {
                                 v = GgufValue::StringArray({"a", "b"});
                                 return true;
                               })),
                   absl::StatusCode::kInvalidArgument,
                   "tokenizer.ggml.tokens has 2 entries but token_embd.weight has 320 rows");
  // Three layers declared, two present.
  EXPECT_STATUS_IS(Load(edited("llama.block_count",
                               [](GgufValue& v) {
                                 v = GgufValue::Uint32(3);
                                 return true;
                               })),
                   absl::StatusCode::kNotFound, "missing tensor 'blk.2.attn_norm.weight'");
  // Found by fuzz_gguf: a block count no file could back used to size the layer array first
  // (hundreds of GB) and exhaust memory; it is refused before anything is allocated.
  EXPECT_STATUS_IS(Load(edited("llama.block_count",
                               [](GgufValue& v) {
                                 v = GgufValue::Uint32(1'000'000'000);
                                 return true;
                               })),
                   absl::StatusCode::kInvalidArgument,
                   "m.gguf: the config's 1000000000 layers are more than the 21 tensors the "
                   "checkpoint holds");
}

}  // namespace
}  // namespace tandem
