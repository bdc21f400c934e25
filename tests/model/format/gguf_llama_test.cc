#include "model/format/gguf_llama.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
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
          type = GgmlType::kQ5_0;
          raw.assign(static_cast<size_t>(shape[0] * shape[1] / 32 * 22), '\0');
        }
        return true;
      });
  EXPECT_STATUS_IS(Load(b), absl::StatusCode::kUnimplemented,
                   "tensor 'blk.0.attn_q.weight' has type Q5_0, which Tandem cannot dequantise");
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
