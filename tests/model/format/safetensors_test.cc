#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "model/format/hf_llama.h"
#include "model/format/rope_scaling.h"
#include "model/format/safetensors_file.h"
#include "tests/model/format/safetensors_test_util.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using ::tandem::testing::MakeTinyHf;
using ::tandem::testing::SafetensorsImage;
using ::tandem::testing::ScopedTempDir;
using ::tandem::testing::StEntry;
using ::tandem::testing::TinyHf;
using ::tandem::testing::WriteFile;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

absl::Status Parse(const std::string& bytes) {
  return SafetensorsFile::FromBytes(bytes, "x.safetensors").status();
}

TEST(SafetensorsTest, ReadsF32F16Bf16) {
  const std::string image = SafetensorsImage({{"a", "F32", {2, 3}, {1, 2, 3, 4, 5, 6.5f}},
                                              {"b", "F16", {2}, {-1.5f, 0.25f}},
                                              {"c", "BF16", {1, 2}, {3.f, -0.5f}}});
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::FromBytes(image, "x");
  ASSERT_OK(f);
  ASSERT_EQ((*f)->tensors().size(), 3u);
  absl::StatusOr<Tensor> a = (*f)->ReadTensor("a");
  ASSERT_OK(a);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->data, (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  EXPECT_EQ((*f)->ReadTensor("b")->data, (std::vector<float>{-1.5f, 0.25f}));
  EXPECT_EQ((*f)->ReadTensor("c")->data, (std::vector<float>{3.f, -0.5f}));
  EXPECT_STATUS_IS((*f)->ReadTensor("d"), absl::StatusCode::kNotFound, "missing tensor 'd'");
}

TEST(SafetensorsTest, MalformedHeaders) {
  const std::string good = SafetensorsImage({{"a", "F32", {2}, {1, 2}}});
  EXPECT_STATUS_IS(Parse("abc"), kInvalid, "truncated safetensors file: 3 bytes");
  std::string b = good;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(b.data(), &huge, 8);
  EXPECT_STATUS_IS(Parse(b), kInvalid, "safetensors header length 1099511627776 exceeds");
  b = good;
  b[8] = '[';
  EXPECT_STATUS_IS(Parse(b), kInvalid, "safetensors header: not a valid JSON object");
  auto with_header = [](const std::string& header, size_t data_bytes) {
    const uint64_t n = header.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + header +
           std::string(data_bytes, '\0');
  };
  EXPECT_STATUS_IS(
      Parse(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,80]}})", 8)), kInvalid,
      "tensor 'a' data_offsets [0, 80) lie outside the data section of 8");
  EXPECT_STATUS_IS(
      Parse(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)), kInvalid,
      "tensor 'a' spans 8 bytes but its shape and dtype need 12");
  EXPECT_STATUS_IS(
      Parse(with_header(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8)), kInvalid,
      "tensor 'a' has unknown dtype 'Q4'");
  EXPECT_STATUS_IS(
      Parse(with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)), kInvalid,
      "tensor 'a' has invalid dimension -2");
  EXPECT_STATUS_IS(
      Parse(with_header(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8)),
      kInvalid, "dimension is 2.5, not an integer");
  EXPECT_STATUS_IS(Parse(with_header(R"({"a":{"dtype":"F32","shape":[2]}})", 8)), kInvalid,
                   "tensor 'a' lacks dtype, shape or data_offsets");
  EXPECT_STATUS_IS(Parse(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                     8)),
                   kInvalid, "tensors 'a' and 'b' overlap");
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::FromBytes(
      with_header(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8), "i.st");
  ASSERT_OK(f);
  EXPECT_STATUS_IS((*f)->ReadTensor("a"), absl::StatusCode::kUnimplemented,
                   "tensor 'a' has dtype I64 (supported: F32, F16, BF16)");
}

void WriteCheckpoint(const std::string& dir, const TinyHf& hf) {
  WriteFile(dir + "/config.json", hf.config_json);
  WriteFile(dir + "/model.safetensors", SafetensorsImage(hf.tensors));
}

void ExpectMatches(const LlamaWeights& w, const TinyHf& hf) {
  for (const StEntry& e : hf.tensors) {
    const Tensor* t = nullptr;
    if (e.name == "model.embed_tokens.weight") t = &w.token_embedding;
    if (e.name == "lm_head.weight") t = &w.output;
    if (e.name == "model.layers.1.mlp.down_proj.weight") t = &w.layers[1].w_down;
    if (e.name == "model.layers.0.self_attn.k_proj.weight") t = &w.layers[0].wk;
    if (e.name == "model.layers.1.self_attn.v_proj.bias") t = &w.layers[1].bv;
    if (e.name == "model.layers.1.self_attn.q_norm.weight") t = &w.layers[1].q_norm;
    if (e.name == "model.layers.0.self_attn.k_norm.weight") t = &w.layers[0].k_norm;
    if (t == nullptr) continue;
    EXPECT_EQ(t->shape, e.shape) << e.name;
    EXPECT_EQ(t->data, e.values) << e.name;  // values are exact in every dtype used
  }
}

TEST(HfLlamaTest, LoadsASingleFileCheckpoint) {
  const ScopedTempDir tmp("hf_single");
  const std::string& dir = tmp.path();
  const TinyHf hf = MakeTinyHf(/*tied=*/false, /*bias=*/true);
  WriteCheckpoint(dir, hf);
  absl::StatusOr<std::unique_ptr<HfCheckpoint>> ck = HfCheckpoint::Open(dir);
  ASSERT_OK(ck);
  const LlamaConfig& c = (*ck)->config();
  EXPECT_TRUE(absl::StartsWith(c.name, "hf_single_")) << c.name;
  EXPECT_EQ(c.vocab_size, 16);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_q_heads, 2);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.max_context, 256);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.f);
  EXPECT_EQ(c.rope_style, RopeStyle::kRotateHalf);
  EXPECT_TRUE(c.has_qkv_bias);
  EXPECT_FALSE(c.tied_embeddings);
  absl::StatusOr<LlamaWeights> w = (*ck)->LoadWeights();
  ASSERT_OK(w);
  ExpectMatches(*w, hf);
}

TEST(HfLlamaTest, LoadsAQwen3CheckpointWithQkNorms) {
  const ScopedTempDir tmp("hf_qwen3");
  const TinyHf hf = MakeTinyHf(/*tied=*/true, /*bias=*/false, /*qwen3=*/true);
  WriteCheckpoint(tmp.path(), hf);
  absl::StatusOr<std::unique_ptr<HfCheckpoint>> ck = HfCheckpoint::Open(tmp.path());
  ASSERT_OK(ck);
  EXPECT_EQ((*ck)->config().architecture, "qwen3");
  EXPECT_TRUE((*ck)->config().has_qk_norm);
  absl::StatusOr<LlamaWeights> w = (*ck)->LoadWeights();
  ASSERT_OK(w);
  EXPECT_EQ(w->layers[1].q_norm.shape, (std::vector<int64_t>{4}));
  ExpectMatches(*w, hf);
}

// phi3: qkv_proj ([2 + 1 + 1 heads of 4][8]) and gate_up_proj ([2·12][8], gate rows first) are
// split by rows into wq, wk, wv and w_gate, w_up.
TEST(HfLlamaTest, LoadsAPhi3CheckpointSplittingItsFusedMatrices) {
  const ScopedTempDir tmp("hf_phi3");
  TinyHf hf = MakeTinyHf(/*tied=*/false, /*bias=*/false, /*qwen3=*/false, /*phi3=*/true);
  // Every row of the fused matrices distinct (row r: r + 0.25·column, exact in F16 and BF16), so
  // a part taken from the wrong rows shows.
  for (StEntry& e : hf.tensors) {
    if (e.name.find("qkv_proj") == std::string::npos &&
        e.name.find("gate_up_proj") == std::string::npos) {
      continue;
    }
    for (size_t j = 0; j < e.values.size(); ++j) {
      e.values[j] = static_cast<float>(j / 8) + 0.25f * static_cast<float>(j % 8);
    }
  }
  WriteCheckpoint(tmp.path(), hf);
  absl::StatusOr<std::unique_ptr<HfCheckpoint>> ck = HfCheckpoint::Open(tmp.path());
  ASSERT_OK(ck);
  EXPECT_EQ((*ck)->config().architecture, "phi3");
  EXPECT_TRUE((*ck)->config().fused_qkv_gate_up);
  absl::StatusOr<LlamaWeights> w = (*ck)->LoadWeights();
  ASSERT_OK(w);
  for (const StEntry& e : hf.tensors) {
    if (e.name != "model.layers.1.self_attn.qkv_proj.weight" &&
        e.name != "model.layers.1.mlp.gate_up_proj.weight") {
      continue;
    }
    const bool qkv = e.name.find("qkv") != std::string::npos;
    const LlamaLayerWeights& l = w->layers[1];
    const std::vector<const Tensor*> parts = qkv ? std::vector<const Tensor*>{&l.wq, &l.wk, &l.wv}
                                                 : std::vector<const Tensor*>{&l.w_gate, &l.w_up};
    const std::vector<int64_t> rows =
        qkv ? std::vector<int64_t>{8, 4, 4} : std::vector<int64_t>{12, 12};
    size_t at = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      EXPECT_EQ(parts[p]->shape, (std::vector<int64_t>{rows[p], 8})) << e.name << " part " << p;
      const std::vector<float> want(e.values.begin() + static_cast<ptrdiff_t>(at),
                                    e.values.begin() + static_cast<ptrdiff_t>(at + rows[p] * 8));
      EXPECT_EQ(parts[p]->data, want) << e.name << " part " << p;
      at += static_cast<size_t>(rows[p] * 8);
    }
  }
}

TEST(HfLlamaTest, LoadsAShardedTiedCheckpoint) {
  const ScopedTempDir tmp("hf_sharded");
  const std::string& dir = tmp.path();
  const TinyHf hf = MakeTinyHf(/*tied=*/true);
  WriteFile(dir + "/config.json", hf.config_json);
  std::vector<StEntry> first(hf.tensors.begin(), hf.tensors.begin() + 5);
  std::vector<StEntry> second(hf.tensors.begin() + 5, hf.tensors.end());
  WriteFile(dir + "/model-00001-of-00002.safetensors", SafetensorsImage(first));
  WriteFile(dir + "/model-00002-of-00002.safetensors", SafetensorsImage(second));
  std::vector<std::string> map;
  for (const StEntry& e : first)
    map.push_back("\"" + e.name + "\":\"model-00001-of-00002.safetensors\"");
  for (const StEntry& e : second)
    map.push_back("\"" + e.name + "\":\"model-00002-of-00002.safetensors\"");
  WriteFile(dir + "/model.safetensors.index.json",
            "{\"metadata\":{},\"weight_map\":{" + absl::StrJoin(map, ",") + "}}");
  absl::StatusOr<std::unique_ptr<HfCheckpoint>> ck = HfCheckpoint::Open(dir);
  ASSERT_OK(ck);
  EXPECT_EQ((*ck)->shards().size(), 2u);
  absl::StatusOr<LlamaWeights> w = (*ck)->LoadWeights();
  ASSERT_OK(w);
  EXPECT_TRUE(w->config.tied_embeddings);
  EXPECT_TRUE(w->output.empty());
  ExpectMatches(*w, hf);
}

// The architectures' config.json shapes, as their published checkpoints write them.
TEST(HfLlamaTest, ParsesQwenMistralAndLlama3Configs) {
  const std::string base =
      R"("vocab_size":16,"hidden_size":8,"intermediate_size":12,"num_hidden_layers":2,)"
      R"("num_attention_heads":2,"num_key_value_heads":1,"hidden_act":"silu")";
  absl::StatusOr<LlamaConfig> c = ParseHfLlamaConfig(
      "{" + base + R"(,"model_type":"qwen2","sliding_window":32768,"use_sliding_window":false})");
  ASSERT_OK(c);
  EXPECT_EQ(c->architecture, "qwen2");
  EXPECT_TRUE(c->has_qkv_bias);  // Qwen2's projections always carry biases
  EXPECT_FALSE(c->has_qk_norm);
  EXPECT_EQ(c->rope_style, RopeStyle::kRotateHalf);
  c = ParseHfLlamaConfig("{" + base +
                         R"(,"model_type":"qwen3","head_dim":8,"attention_bias":false})");
  ASSERT_OK(c);
  EXPECT_EQ(c->architecture, "qwen3");
  EXPECT_FALSE(c->has_qkv_bias);
  EXPECT_TRUE(c->has_qk_norm);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_STATUS_IS(
      ParseHfLlamaConfig("{" + base + R"(,"model_type":"qwen2","use_sliding_window":true})"),
      absl::StatusCode::kUnimplemented, "use_sliding_window true is not supported");
  c = ParseHfLlamaConfig("{" + base +
                         R"(,"model_type":"mistral","sliding_window":null,)"
                         R"("max_position_embeddings":32768})");
  ASSERT_OK(c);
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_STATUS_IS(ParseHfLlamaConfig("{" + base +
                                      R"(,"model_type":"mistral","sliding_window":4096,)"
                                      R"("max_position_embeddings":32768})"),
                   absl::StatusCode::kUnimplemented,
                   "sliding_window 4096 is not supported (sliding-window attention shorter than "
                   "max_position_embeddings 32768)");
  // Llama 3.x: divisors from rope_scaling, the same as model/format/rope_scaling.h computes.
  c = ParseHfLlamaConfig(
      "{" + base +
      R"(,"model_type":"llama","rope_theta":500000.0,"rope_scaling":{"factor":8.0,)"
      R"("low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,)"
      R"("rope_type":"llama3"}})");
  ASSERT_OK(c);
  absl::StatusOr<std::vector<float>> want =
      Llama3RopeFreqFactors(4, 500000.f, Llama3RopeScaling{8.f, 1.f, 4.f, 8192});
  ASSERT_OK(want);
  EXPECT_EQ(c->rope_freq_factors, *want);
  c = ParseHfLlamaConfig("{" + base + R"(,"rope_scaling":{"type":"linear","factor":2.0}})");
  ASSERT_OK(c);
  EXPECT_EQ(c->rope_freq_factors, std::vector<float>(2, 2.f));
  c = ParseHfLlamaConfig("{" + base + R"(,"rope_scaling":{"rope_type":"default"}})");
  ASSERT_OK(c);
  EXPECT_TRUE(c->rope_freq_factors.empty());
  EXPECT_STATUS_IS(
      ParseHfLlamaConfig("{" + base + R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0}})"),
      absl::StatusCode::kNotFound, "original_max_position_embeddings is missing");
  // YaRN as Qwen2.5's model card writes it (head_dim 16 via qwen3's head_dim, theta 1e4, original
  // context 32): pair 0 extrapolates, pair 1 blends, the rest interpolate; magnitude
  // 1 + 0.1 ln 4, or attention_factor where the config gives one (transformers: it replaces).
  const std::string qwen_yarn =
      "{" + base +
      R"(,"model_type":"qwen3","head_dim":16,"rope_theta":10000.0,"rope_scaling":{"type":"yarn",)"
      R"("factor":4.0,"original_max_position_embeddings":32)";
  c = ParseHfLlamaConfig(qwen_yarn + "}}");
  ASSERT_OK(c);
  ASSERT_EQ(c->rope_freq_factors.size(), 8u);
  EXPECT_FLOAT_EQ(c->rope_freq_factors[0], 1.f);
  EXPECT_FLOAT_EQ(c->rope_freq_factors[1], 1.6f);
  EXPECT_FLOAT_EQ(c->rope_freq_factors[7], 4.f);
  EXPECT_NEAR(c->rope_mscale, 1.1386294, 1e-6);
  c = ParseHfLlamaConfig(qwen_yarn + R"(,"attention_factor":1.25,"beta_fast":64.0}})");
  ASSERT_OK(c);
  EXPECT_FLOAT_EQ(c->rope_mscale, 1.25f);
  EXPECT_STATUS_IS(ParseHfLlamaConfig(qwen_yarn + R"(,"mscale":0.707,"mscale_all_dim":0.707}})"),
                   absl::StatusCode::kUnimplemented,
                   "rope_scaling.mscale 0.707 is not supported (yarn)");
  EXPECT_STATUS_IS(ParseHfLlamaConfig(qwen_yarn + R"(,"truncate":false}})"),
                   absl::StatusCode::kUnimplemented,
                   "rope_scaling.truncate false is not supported");
  EXPECT_STATUS_IS(
      ParseHfLlamaConfig("{" + base + R"(,"rope_scaling":{"rope_type":"longrope","factor":4.0}})"),
      absl::StatusCode::kUnimplemented, "rope_scaling.rope_type 'longrope' is not supported");
}

TEST(HfLlamaTest, CheckpointErrors) {
  const ScopedTempDir tmp("hf_errors");
  const std::string& dir = tmp.path();
  TinyHf hf = MakeTinyHf();
  EXPECT_STATUS_IS(HfCheckpoint::Open(dir), absl::StatusCode::kNotFound, "config.json");
  WriteFile(dir + "/config.json", hf.config_json);
  EXPECT_STATUS_IS(HfCheckpoint::Open(dir), absl::StatusCode::kNotFound,
                   "neither model.safetensors nor model.safetensors.index.json");
  // Missing tensor.
  std::vector<StEntry> missing = hf.tensors;
  missing.erase(missing.begin() + 4);
  WriteFile(dir + "/model.safetensors", SafetensorsImage(missing));
  absl::StatusOr<std::unique_ptr<HfCheckpoint>> ck = HfCheckpoint::Open(dir);
  ASSERT_OK(ck);
  EXPECT_STATUS_IS((*ck)->LoadWeights(), absl::StatusCode::kNotFound,
                   "missing tensor '" + hf.tensors[4].name + "'");
  // Shape mismatch.
  std::vector<StEntry> reshaped = hf.tensors;
  reshaped[0].shape = {8, 16};
  WriteFile(dir + "/model.safetensors", SafetensorsImage(reshaped));
  ck = HfCheckpoint::Open(dir);
  ASSERT_OK(ck);
  EXPECT_STATUS_IS((*ck)->LoadWeights(), kInvalid,
                   "tensor 'model.embed_tokens.weight' has shape [8, 16], expected [16, 8]");
  // A layer count no checkpoint of this size could back is refused before the layers are
  // allocated (fuzz_gguf found the same for GGUF's llama.block_count).
  WriteFile(dir + "/model.safetensors", SafetensorsImage(hf.tensors));
  WriteFile(dir + "/config.json",
            absl::StrReplaceAll(hf.config_json, {{R"("num_hidden_layers":2)",
                                                  R"("num_hidden_layers":2000000000)"}}));
  ck = HfCheckpoint::Open(dir);
  ASSERT_OK(ck);
  EXPECT_STATUS_IS((*ck)->LoadWeights(), kInvalid,
                   absl::StrCat("the config's 2000000000 layers are more than the ",
                                hf.tensors.size(), " tensors the checkpoint holds"));
  // Unsupported config.
  WriteFile(dir + "/config.json", R"({"model_type":"gemma2"})");
  EXPECT_STATUS_IS(
      HfCheckpoint::Open(dir), absl::StatusCode::kUnimplemented,
      "model_type 'gemma2' is not supported (supported: llama, mistral, qwen2, qwen3, phi3)");
  WriteFile(dir + "/config.json",
            absl::StrReplaceAll(hf.config_json,
                                {{R"("rope_scaling":null)", R"("rope_scaling":{"type":"su"})"}}));
  EXPECT_STATUS_IS(HfCheckpoint::Open(dir), absl::StatusCode::kUnimplemented,
                   "rope_scaling.rope_type 'su' is not supported");
  WriteFile(dir + "/config.json", R"({"model_type":"llama","vocab_size":16})");
  EXPECT_STATUS_IS(HfCheckpoint::Open(dir), absl::StatusCode::kNotFound,
                   "config.json: hidden_size is missing");
  WriteFile(dir + "/config.json", "{not json");
  EXPECT_STATUS_IS(HfCheckpoint::Open(dir), kInvalid, "config.json: not a valid JSON object");
  // An index may only name files inside the checkpoint.
  WriteFile(dir + "/config.json", hf.config_json);
  WriteFile(dir + "/model.safetensors.index.json",
            R"({"weight_map":{"model.norm.weight":"../elsewhere.safetensors"}})");
  EXPECT_STATUS_IS(HfCheckpoint::Open(dir), kInvalid,
                   "shard name '../elsewhere.safetensors' must be a plain file name");
}

}  // namespace
}  // namespace tandem
