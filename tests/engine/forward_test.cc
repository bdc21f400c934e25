// The forward pass through the paged cache against a dense double-precision recompute
// (tests/engine/reference_forward.h), on one rank; and against llama.cpp's own logits for
// synthetic models of each architecture (fixtures from bench/peer/reference_logits.sh).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/instance.h"
#include "gtest/gtest.h"
#include "model/format/rope_scaling.h"
#include "tests/engine/llamacpp_fixture.h"
#include "tests/engine/reference_forward.h"
#include "tests/engine/test_model.h"

namespace tandem {
namespace {

using testing::RandomWeights;
using testing::ReferenceLogits;
using testing::SmallConfig;

// Max abs difference relative to the reference's largest magnitude. f32 with fp32 accumulation
// against double over 2 layers: observed ~1e-6; the bound leaves room without hiding bugs (a
// wrong RoPE pair or head mapping gives O(1) errors).
constexpr double kTolerance = 2e-4;

double RelError(const float* got, const std::vector<double>& want) {
  double max_ref = 1.0, max_diff = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(want[i]));
    max_diff = std::max(max_diff, std::abs(got[i] - want[i]));
  }
  return max_diff / max_ref;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& v : t) v = static_cast<int32_t>(rng() % vocab);
  return t;
}

std::unique_ptr<Instance> MakeInstance(const LlamaWeights& w, int32_t block_size) {
  InstanceOptions o;
  o.parallel.block_size = block_size;
  o.kv_bytes_per_rank = int64_t{8} << 20;
  auto inst = Instance::Create(w, o);
  EXPECT_TRUE(inst.ok()) << inst.status();
  return std::move(inst).value();
}

// A shuffled block table so that paging (non-identity ids) is exercised.
std::vector<int32_t> Table(int32_t blocks, uint64_t seed, int32_t offset = 0) {
  std::vector<int32_t> t(blocks);
  for (int32_t i = 0; i < blocks; ++i) t[i] = offset + i;
  std::shuffle(t.begin(), t.end(), std::mt19937_64(seed));
  return t;
}

void CheckPrefillThenDecode(const LlamaConfig& config) {
  const LlamaWeights w = RandomWeights(config, 11);
  auto inst = MakeInstance(w, 4);
  const std::vector<int32_t> seq = RandomTokens(21, config.vocab_size, 3);
  const auto ref = ReferenceLogits(w, seq);
  const std::vector<int32_t> table = Table(6, 1);
  const int prompt = 13;
  StepInput pre;
  pre.requests.push_back({0, std::vector<int32_t>(seq.begin(), seq.begin() + prompt), table, true});
  auto logits = inst->Run(pre);
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_LT(RelError(logits->data(), ref[prompt - 1]), kTolerance);
  // Step-by-step decode with the cache == full recompute of the longer sequence.
  for (int pos = prompt; pos < static_cast<int>(seq.size()); ++pos) {
    StepInput step;
    step.requests.push_back({pos, {seq[pos]}, table, true});
    auto l = inst->Run(step);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_LT(RelError(l->data(), ref[pos]), kTolerance) << "position " << pos;
  }
}

TEST(ForwardTest, PrefillAndDecodeMatchDenseRecompute) { CheckPrefillThenDecode(SmallConfig()); }

TEST(ForwardTest, RotateHalfRopeAndQkvBiasMatchDenseRecompute) {
  LlamaConfig c = SmallConfig();
  c.rope_style = RopeStyle::kRotateHalf;
  c.has_qkv_bias = true;
  c.tied_embeddings = true;
  CheckPrefillThenDecode(c);
}

// Qwen3: per-head RMSNorm of Q and K before rotate-half RoPE, no biases.
TEST(ForwardTest, Qwen3QkNormMatchesDenseRecompute) {
  LlamaConfig c = SmallConfig();
  c.architecture = "qwen3";
  c.rope_style = RopeStyle::kRotateHalf;
  c.has_qk_norm = true;
  c.head_dim = 32;  // head_dim · heads ≠ hidden, as in Qwen3 checkpoints
  CheckPrefillThenDecode(c);
}

// Llama 3.x rope_scaling (divisors 1, blended and `factor` all present over head_dim 16) on
// adjacent pairs, and linear scaling on a Qwen2-style model (biases, rotate-half).
TEST(ForwardTest, RopeFrequencyFactorsMatchDenseRecompute) {
  LlamaConfig c = SmallConfig();
  absl::StatusOr<std::vector<float>> l3 =
      Llama3RopeFreqFactors(c.head_dim, c.rope_theta, Llama3RopeScaling{8.f, 1.f, 4.f, 64});
  ASSERT_TRUE(l3.ok()) << l3.status();
  c.rope_freq_factors = *l3;
  CheckPrefillThenDecode(c);
  c.architecture = "qwen2";
  c.rope_style = RopeStyle::kRotateHalf;
  c.has_qkv_bias = true;
  c.rope_freq_factors.assign(c.head_dim / 2, 4.f);
  CheckPrefillThenDecode(c);
}

TEST(ForwardTest, ChunkedPrefillEqualsOnePass) {
  const LlamaWeights w = RandomWeights(SmallConfig(), 5);
  auto inst = MakeInstance(w, 4);
  const std::vector<int32_t> seq = RandomTokens(17, SmallConfig().vocab_size, 9);
  StepInput whole;
  whole.requests.push_back({0, seq, Table(5, 2), true});
  auto one = inst->Run(whole);
  ASSERT_TRUE(one.ok());
  const std::vector<int32_t> table = Table(5, 3, 5);
  std::vector<float> last;
  for (int start = 0; start < 17; start += 5) {
    const int end = std::min(17, start + 5);
    StepInput chunk;
    chunk.requests.push_back(
        {start, std::vector<int32_t>(seq.begin() + start, seq.begin() + end), table, end == 17});
    auto l = inst->Run(chunk);
    ASSERT_TRUE(l.ok());
    if (end == 17) last = *l;
  }
  ASSERT_EQ(last.size(), one->size());
  for (size_t i = 0; i < last.size(); ++i) EXPECT_NEAR(last[i], (*one)[i], 1e-4);
}

TEST(ForwardTest, BatchedDecodeEqualsEachAlone) {
  const LlamaConfig c = SmallConfig();
  const LlamaWeights w = RandomWeights(c, 21);
  auto inst = MakeInstance(w, 4);
  const std::vector<int> lengths = {1, 6, 11};
  std::vector<std::vector<int32_t>> seqs, tables;
  StepInput prefill;
  for (size_t r = 0; r < lengths.size(); ++r) {
    seqs.push_back(RandomTokens(lengths[r] + 1, c.vocab_size, 40 + r));
    tables.push_back(Table(4, 7 + r, 4 * static_cast<int32_t>(r)));
    prefill.requests.push_back(
        {0, std::vector<int32_t>(seqs[r].begin(), seqs[r].end() - 1), tables[r], false});
  }
  ASSERT_TRUE(inst->Run(prefill).ok());
  StepInput batch;
  for (size_t r = 0; r < lengths.size(); ++r) {
    batch.requests.push_back({lengths[r], {seqs[r].back()}, tables[r], true});
  }
  auto together = inst->Run(batch);
  ASSERT_TRUE(together.ok());
  for (size_t r = 0; r < lengths.size(); ++r) {
    StepInput alone;
    alone.requests.push_back(batch.requests[r]);
    auto l = inst->Run(alone);  // rewrites the same K/V at the same slot: idempotent
    ASSERT_TRUE(l.ok());
    for (int32_t v = 0; v < c.vocab_size; ++v) {
      ASSERT_NEAR((*together)[r * c.vocab_size + v], (*l)[v], 1e-5) << "request " << r;
    }
    const auto ref = ReferenceLogits(w, seqs[r]);
    EXPECT_LT(RelError(l->data(), ref.back()), kTolerance);
  }
}

// ---- llama.cpp as the oracle ----
// tests/engine/testdata/llamacpp/*.txt (bench/peer/reference_logits.sh): llama.cpp's logits at
// two prompt positions and its greedy tokens for a synthetic model recorded by its
// tandem-make-model options. Tandem rebuilds the same model in memory and must agree within
// 1e-3 (max |diff| over max |logit|; both compute in f32, so ~1e-6 is typical) and produce the
// same greedy tokens, on one rank and on a TP x PCP x DCP layout.
constexpr double kLlamaCppTolerance = 1e-3;

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

void CheckAgainstLlamaCpp(const std::string& name, const std::string& want_arch) {
  const testing::LlamaCppFixture f = testing::ReadLlamaCppFixture(name);
  ASSERT_EQ(f.options.arch, want_arch);
  ASSERT_EQ(f.logits.size(), 2u);
  ASSERT_EQ(f.greedy.size(), 4u);
  const LlamaWeights weights = testing::LoadFixtureModel(f);
  const LlamaWeights* w = &weights;
  ASSERT_FALSE(w->layers.empty());
  const int32_t vocab = w->config.vocab_size;
  for (const ParallelConfig& parallel :
       {ParallelConfig{1, 1, 1, 4, 1}, ParallelConfig{2, 2, 2, 16, 1}}) {
    SCOPED_TRACE(absl::StrCat(name, " on ", parallel.ToString()));
    InstanceOptions o;
    o.parallel = parallel;
    o.kv_bytes_per_rank = int64_t{8} << 20;
    absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(*w, o);
    ASSERT_TRUE(inst.ok()) << inst.status();
    // Blocks for the prompt and the greedy tokens (40 + 4 for the long-context fixtures).
    const int32_t tokens = static_cast<int32_t>(f.prompt.size() + f.greedy.size());
    const std::vector<int32_t> table = Table(std::max(8, tokens / parallel.block_size + 2), 4);
    // The prompt in chunks that end at the recorded positions (chunked prefill on the way).
    int32_t start = 0;
    std::vector<float> last;
    for (const auto& [pos, want] : f.logits) {
      ASSERT_EQ(want.size(), static_cast<size_t>(vocab));
      StepInput chunk;
      chunk.requests.push_back(
          {start, std::vector<int32_t>(f.prompt.begin() + start, f.prompt.begin() + pos + 1), table,
           true});
      absl::StatusOr<std::vector<float>> got = (*inst)->Run(chunk);
      ASSERT_TRUE(got.ok()) << got.status();
      const double err = RelError(got->data(), want);
      EXPECT_LT(err, kLlamaCppTolerance) << "position " << pos;
      std::printf("llama.cpp agreement: %s %s position %d: max |diff| / max |logit| = %.3g\n",
                  name.c_str(), parallel.ToString().c_str(), pos, err);
      start = pos + 1;
      last = *got;
    }
    ASSERT_EQ(start, static_cast<int32_t>(f.prompt.size()));
    std::vector<int32_t> greedy = {Argmax(last)};
    while (greedy.size() < f.greedy.size()) {
      StepInput step;
      step.requests.push_back({start++, {greedy.back()}, table, true});
      absl::StatusOr<std::vector<float>> got = (*inst)->Run(step);
      ASSERT_TRUE(got.ok()) << got.status();
      greedy.push_back(Argmax(*got));
    }
    EXPECT_EQ(greedy, f.greedy);
  }
}

TEST(ForwardTest, LlamaCppReferenceLlama) { CheckAgainstLlamaCpp("llama", "llama"); }
TEST(ForwardTest, LlamaCppReferenceQwen2) { CheckAgainstLlamaCpp("qwen2", "qwen2"); }
TEST(ForwardTest, LlamaCppReferenceQwen3) { CheckAgainstLlamaCpp("qwen3", "qwen3"); }
// Fused attn_qkv and ffn_up, split at load: on TP 2 the Q, K, V and gate/up rows of each rank
// come from the right part of the fused matrices.
TEST(ForwardTest, LlamaCppReferencePhi3) { CheckAgainstLlamaCpp("phi3", "phi3"); }
TEST(ForwardTest, LlamaCppReferenceLlama3RopeScaling) {
  CheckAgainstLlamaCpp("llama3_rope", "llama");
}
// YaRN (factor 4, original context 32: blended divisors and the magnitude 1 + 0.1 ln 4) and
// linear scaling over 40 prompt tokens: the second logits row (position 39) and all four greedy
// tokens (positions 40-43) lie past the original context.
TEST(ForwardTest, LlamaCppReferenceQwen2Yarn) { CheckAgainstLlamaCpp("qwen2_yarn", "qwen2"); }
TEST(ForwardTest, LlamaCppReferenceLlamaLinearRopeScaling) {
  CheckAgainstLlamaCpp("llama_linear", "llama");
}

TEST(ForwardTest, RejectsBadSteps) {
  const LlamaWeights w = RandomWeights(SmallConfig(), 1);
  auto inst = MakeInstance(w, 4);
  StepInput bad_token;
  bad_token.requests.push_back({0, {SmallConfig().vocab_size}, {0}, true});
  EXPECT_EQ(inst->Run(bad_token).status().code(), absl::StatusCode::kInvalidArgument);
  StepInput short_table;
  short_table.requests.push_back({0, std::vector<int32_t>(9, 1), {0, 1}, true});
  EXPECT_EQ(inst->Run(short_table).status().code(), absl::StatusCode::kInvalidArgument);
  // The instance keeps serving after rejected input.
  StepInput ok;
  ok.requests.push_back({0, {1, 2}, {0}, true});
  EXPECT_TRUE(inst->Run(ok).ok());
}

}  // namespace
}  // namespace tandem
