// The real model (SmolLM2-135M-Instruct, Q4_1 GGUF): config values, shapes and load time.
// Expected values come from the model card and the file's metadata as printed by the `gguf`
// Python package during development.
#include <chrono>
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "model/format/dequant.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_llama.h"
#include "model/format/model_loader.h"
#include "tests/model/format/model_env.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using ::tandem::testing::ModelPath;
using ::tandem::testing::RealModelTest;

TEST_F(RealModelTest, HeaderAndTensorTypes) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(ModelPath());
  ASSERT_OK(f);
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->tensors().size(), 272u);
  EXPECT_EQ(*(*f)->GetString("tokenizer.ggml.pre"), "smollm");
  const GgufTensorInfo* embd = (*f)->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kQ8_0);
  EXPECT_EQ((*f)->FindTensor("blk.0.ffn_down.weight")->type, GgmlType::kQ4_1);
}

TEST_F(RealModelTest, ConfigShapesAndValues) {
  std::vector<std::string> lines;
  LoadOptions options;
  options.progress = [&lines](absl::string_view l) { lines.emplace_back(l); };
  options.keep_quantized = false;  // every tensor as f32: the values below
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<LoadedModel> m = LoadModel(ModelPath(), options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_OK(m);
  for (const std::string& l : lines) std::printf("%s\n", l.c_str());
  const LlamaConfig& c = m->weights.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_q_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.has_qkv_bias);
  const LlamaWeights& w = m->weights;
  EXPECT_EQ(w.token_embedding.shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_TRUE(w.output.empty());
  EXPECT_EQ(&w.lm_head(), &w.token_embedding);
  ASSERT_EQ(w.layers.size(), 30u);
  for (const LlamaLayerWeights& l : w.layers) {
    EXPECT_EQ(l.wq.shape, (std::vector<int64_t>{576, 576}));
    EXPECT_EQ(l.wk.shape, (std::vector<int64_t>{192, 576}));
    EXPECT_EQ(l.wv.shape, (std::vector<int64_t>{192, 576}));
    EXPECT_EQ(l.wo.shape, (std::vector<int64_t>{576, 576}));
    EXPECT_EQ(l.w_gate.shape, (std::vector<int64_t>{1536, 576}));
    EXPECT_EQ(l.w_up.shape, (std::vector<int64_t>{1536, 576}));
    EXPECT_EQ(l.w_down.shape, (std::vector<int64_t>{576, 1536}));
    EXPECT_EQ(l.attn_norm.shape, (std::vector<int64_t>{576}));
  }
  // Values checked against the `gguf` package's dequantize() during development.
  EXPECT_FLOAT_EQ(w.token_embedding.data[0], -0.10654449462890625f);
  EXPECT_FLOAT_EQ(w.layers[0].w_down.data[0], -0.330810546875f);
  EXPECT_FLOAT_EQ(w.layers[3].attn_norm.data[0], 0.1376953125f);
  double sum = 0;
  for (const float x : w.layers[0].w_down.data) sum += x;
  EXPECT_NEAR(sum, 150.635773, 1e-3);
  ASSERT_NE(m->tokenizer, nullptr);
  EXPECT_EQ(m->tokenizer->vocab_size(), 49152);
  EXPECT_EQ(m->default_system_prompt,
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  std::printf("load of the 135M model took %.2f s\n", seconds);
  EXPECT_LT(seconds, 20.0);  // generous: sanitizer builds are ~10x slower
}

// The default load keeps the matrices as the file's blocks (Q4_1 layers, Q8_0 embedding), at the
// file's size, and dequantising them gives exactly the f32 load's values.
TEST_F(RealModelTest, DefaultLoadKeepsTheFilesBlocksAndTheyDequantiseToTheF32Load) {
  LoadOptions quiet;
  quiet.progress = [](absl::string_view) {};
  absl::StatusOr<LoadedModel> q = LoadModel(ModelPath(), quiet);
  ASSERT_OK(q);
  quiet.keep_quantized = false;
  absl::StatusOr<LoadedModel> f = LoadModel(ModelPath(), quiet);
  ASSERT_OK(f);
  const LlamaWeights& qw = q->weights;
  EXPECT_EQ(qw.token_embedding.type, GgmlType::kQ8_0);
  EXPECT_TRUE(qw.token_embedding.data.empty());
  EXPECT_EQ(qw.token_embedding.blocks.size(), 49152u * 576 / 32 * 34);
  EXPECT_EQ(qw.token_embedding.numel(), 49152 * 576);
  EXPECT_FALSE(qw.layers[0].attn_norm.quantized());  // vectors stay f32
  int64_t kept = 0;
  for (size_t l = 0; l < qw.layers.size(); ++l) {
    for (auto member : {&LlamaLayerWeights::wq, &LlamaLayerWeights::wk, &LlamaLayerWeights::wv,
                        &LlamaLayerWeights::wo, &LlamaLayerWeights::w_gate,
                        &LlamaLayerWeights::w_up, &LlamaLayerWeights::w_down}) {
      const Tensor& t = qw.layers[l].*member;
      ASSERT_EQ(t.type, GgmlType::kQ4_1);
      kept += static_cast<int64_t>(t.blocks.size());
      std::vector<float> values(t.numel());
      ASSERT_OK(Dequantize(t.type, absl::MakeConstSpan(t.blocks), absl::MakeSpan(values)));
      ASSERT_EQ(values, (f->weights.layers[l].*member).data) << "layer " << l;
    }
  }
  EXPECT_EQ(kept, 30 * (576 * 576 * 2 + 192 * 576 * 2 + 1536 * 576 * 3) / 32 * 20);
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) { return tandem::testing::RunModelTests(argc, argv); }
