#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/logprobs.h"
#include "model/token_history.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

TEST(SamplingTest, GreedyPicksTheLargestLogitLowestIndexOnTies) {
  const std::vector<float> logits = {0.1f, 2.f, -1.f, 2.f};
  EXPECT_EQ(ArgMax(logits), 1);
  EXPECT_EQ(SampleToken(logits, SamplingParams{}, 0), 1);
  // top_k = 1 is greedy whatever the temperature.
  EXPECT_EQ(SampleToken(logits, SamplingParams{5.f, 1, 1.f, 7}, 3), 1);
}

TEST(SamplingTest, ValidationNamesTheField) {
  EXPECT_THAT(ValidateSamplingParams({-0.5f, 0, 1.f, 0}).message(), HasSubstr("temperature"));
  EXPECT_THAT(ValidateSamplingParams({NAN, 0, 1.f, 0}).message(), HasSubstr("temperature"));
  EXPECT_THAT(ValidateSamplingParams({1.f, -1, 1.f, 0}).message(), HasSubstr("top_k"));
  EXPECT_THAT(ValidateSamplingParams({1.f, 0, 0.f, 0}).message(), HasSubstr("top_p"));
  EXPECT_THAT(ValidateSamplingParams({1.f, 0, 1.5f, 0}).message(), HasSubstr("top_p"));
  EXPECT_EQ(ValidateSamplingParams({1.f, 0, 1.5f, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateSamplingParams({0.7f, 40, 0.9f, 1}).ok());
}

TEST(SamplingTest, SameSeedAndStepGiveTheSameTokenDifferentSeedsDiffer) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(i * 0.7f);
  const SamplingParams p{1.f, 0, 1.f, 42};
  int differ = 0;
  for (uint64_t step = 0; step < 64; ++step) {
    EXPECT_EQ(SampleToken(logits, p, step), SampleToken(logits, p, step));
    SamplingParams q = p;
    q.seed = 43;
    differ += SampleToken(logits, p, step) != SampleToken(logits, q, step);
  }
  EXPECT_GT(differ, 20);
}

// Empirical frequencies follow softmax(logits / T).
TEST(SamplingTest, TemperatureSamplingFollowsTheSoftmax) {
  const std::vector<float> logits = {1.f, 2.f, 0.f};
  const float t = 0.8f;
  double z = 0;
  std::vector<double> want(3);
  for (int i = 0; i < 3; ++i) z += want[i] = std::exp(logits[i] / t);
  std::map<int, int> counts;
  const int n = 20000;
  for (int s = 0; s < n; ++s) ++counts[SampleToken(logits, SamplingParams{t, 0, 1.f, 9}, s)];
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(counts[i] / static_cast<double>(n), want[i] / z, 0.015);
}

TEST(SamplingTest, TopKAndTopPRestrictTheCandidates) {
  // probs (T = 1) ≈ 0.64, 0.24, 0.09, 0.03.
  const std::vector<float> logits = {3.f, 2.f, 1.f, 0.f};
  for (uint64_t s = 0; s < 2000; ++s) {
    EXPECT_LT(SampleToken(logits, SamplingParams{1.f, 2, 1.f, 1}, s), 2);   // top-2
    EXPECT_LT(SampleToken(logits, SamplingParams{1.f, 0, 0.8f, 2}, s), 2);  // 0.64 < 0.8 <= 0.88
    EXPECT_EQ(SampleToken(logits, SamplingParams{1.f, 0, 0.5f, 3}, s), 0);  // first token suffices
  }
}

TEST(SamplingTest, ValidationNamesTheNewFields) {
  auto check = [](auto mutate, const char* field) {
    SamplingParams p;
    p.temperature = 1.f;
    mutate(p);
    const absl::Status s = ValidateSamplingParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(s.message(), HasSubstr(field));
  };
  check([](SamplingParams& p) { p.min_p = -0.1f; }, "min_p");
  check([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  check([](SamplingParams& p) { p.repetition_penalty = 0.f; }, "repetition_penalty");
  check([](SamplingParams& p) { p.repetition_penalty = INFINITY; }, "repetition_penalty");
  check([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  check([](SamplingParams& p) { p.frequency_penalty = -2.5f; }, "frequency_penalty");
  check([](SamplingParams& p) { p.frequency_penalty = NAN; }, "frequency_penalty");
  check([](SamplingParams& p) { p.logit_bias = {{3, 101.f}}; }, "logit_bias");
  check([](SamplingParams& p) { p.logit_bias = {{-1, 1.f}}; }, "logit_bias");
  check([](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens");
  check([](SamplingParams& p) { p.min_tokens_stop_ids = {-2}; }, "min_tokens_stop_ids");
  SamplingParams ok;
  ok.min_p = 1.f;
  ok.repetition_penalty = 1.3f;
  ok.presence_penalty = -2.f;
  ok.frequency_penalty = 2.f;
  ok.logit_bias = {{0, -100.f}, {9, 100.f}};
  ok.min_tokens = 4;
  ok.min_tokens_stop_ids = {2};
  EXPECT_TRUE(ValidateSamplingParams(ok).ok());
  EXPECT_TRUE(ValidateSamplingIds(ok, 10).ok());
  EXPECT_THAT(ValidateSamplingIds(ok, 9).message(), HasSubstr("logit_bias token id 9"));
  ok.logit_bias.clear();
  EXPECT_THAT(ValidateSamplingIds(ok, 2).message(), HasSubstr("min_tokens_stop_ids"));
}

TEST(SamplingTest, TokenHistorySplitsTheContextAtTheDrawNumber) {
  // Context = prompt {5, 6, 5} + generated {7, 5}: draw 2 is next.
  const std::vector<int32_t> context = {5, 6, 5, 7, 5};
  TokenHistory h(context, 2);
  EXPECT_EQ(h.num_output(), 2);
  EXPECT_EQ(h.prompt_ids(), (absl::flat_hash_set<int32_t>{5, 6}));
  EXPECT_EQ(h.output_counts(), (absl::flat_hash_map<int32_t, int32_t>{{7, 1}, {5, 1}}));
  h.AddOutput(7);
  EXPECT_EQ(h.num_output(), 3);
  EXPECT_EQ(h.output_counts().at(7), 2);
}

TEST(SamplingTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  const std::vector<float> logits = {2.f, -2.f, 1.f, 3.f, 0.5f};
  SamplingParams p;
  p.repetition_penalty = 2.f;
  // Token 0 and 1 in the prompt, 2 in the output; 3 and 4 never seen.
  const std::vector<int32_t> context = {0, 1, 2};
  const TokenHistory h(context, 1);
  const std::vector<float> out = ProcessLogits(logits, p, 1, &h);
  EXPECT_FLOAT_EQ(out[0], 1.f);
  EXPECT_FLOAT_EQ(out[1], -4.f);
  EXPECT_FLOAT_EQ(out[2], 0.5f);
  EXPECT_FLOAT_EQ(out[3], 3.f);
  EXPECT_FLOAT_EQ(out[4], 0.5f);
}

TEST(SamplingTest, PresenceAndFrequencyPenaltiesSeeOnlyTheOutput) {
  const std::vector<float> logits = {1.f, 1.f, 1.f};
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  // Prompt {0}; output {1, 1, 2}.
  const std::vector<int32_t> context = {0, 1, 1, 2};
  const TokenHistory h(context, 3);
  const std::vector<float> out = ProcessLogits(logits, p, 3, &h);
  EXPECT_FLOAT_EQ(out[0], 1.f);                     // prompt only: untouched
  EXPECT_FLOAT_EQ(out[1], 1.f - 0.5f - 2 * 0.25f);  // twice in the output
  EXPECT_FLOAT_EQ(out[2], 1.f - 0.5f - 0.25f);
}

TEST(SamplingTest, MinPNearOneAtHighTemperatureLeavesTheGreedyToken) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = -0.1f * static_cast<float>((i * 37 + 11) % 100);
  const int32_t greedy = ArgMax(logits);
  SamplingParams p;
  p.temperature = 2.f;
  p.min_p = 0.99f;
  p.seed = 17;
  for (uint64_t s = 0; s < 500; ++s) EXPECT_EQ(SampleToken(logits, p, s), greedy);
  p.min_p = 0.f;  // without it the draws spread out
  int other = 0;
  for (uint64_t s = 0; s < 500; ++s) other += SampleToken(logits, p, s) != greedy;
  EXPECT_GT(other, 100);
}

TEST(SamplingTest, LogitBiasMovesAndForcesTheGreedyToken) {
  const std::vector<float> logits = {0.5f, 3.f, 2.5f, -1.f};
  SamplingParams p;
  p.logit_bias = {{1, -100.f}};
  EXPECT_EQ(SampleToken(logits, p, 0), 2);
  p.logit_bias = {{3, 100.f}};
  EXPECT_EQ(SampleToken(logits, p, 0), 3);
  p.temperature = 1.5f;  // forced under sampling too
  for (uint64_t s = 0; s < 200; ++s) EXPECT_EQ(SampleToken(logits, p, s), 3);
}

TEST(SamplingTest, MinTokensMasksTheStopIdsUntilReached) {
  const std::vector<float> logits = {0.f, 5.f, 1.f, 4.f};  // 1 is the greedy token
  SamplingParams p;
  p.min_tokens = 3;
  p.min_tokens_stop_ids = {1, 3};
  for (uint64_t step = 0; step < 3; ++step) EXPECT_EQ(SampleToken(logits, p, step), 2) << step;
  EXPECT_EQ(SampleToken(logits, p, 3), 1);
  p.temperature = 1.f;
  for (uint64_t s = 0; s < 300; ++s) {
    const int32_t t = SampleToken(logits, p, s % 3);
    EXPECT_TRUE(t == 0 || t == 2) << t;
  }
}

// ---- Against a plain reference: vLLM's sampler written out over the whole vocabulary. ----

struct Case {
  std::vector<float> logits;
  SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
};

std::vector<float> ReferenceProcess(const Case& c) {
  const SamplingParams& p = c.params;
  std::vector<float> l = c.logits;
  const int vocab = static_cast<int>(l.size());
  if (c.output.size() < static_cast<size_t>(p.min_tokens)) {
    for (int32_t id : p.min_tokens_stop_ids) l[id] = -std::numeric_limits<float>::infinity();
  }
  for (const auto& [id, bias] : p.logit_bias) l[id] += bias;
  for (int v = 0; v < vocab; ++v) {
    const bool in_prompt = std::count(c.prompt.begin(), c.prompt.end(), v) > 0;
    const int count = static_cast<int>(std::count(c.output.begin(), c.output.end(), v));
    if (in_prompt || count > 0) {
      l[v] = l[v] > 0 ? l[v] / p.repetition_penalty : l[v] * p.repetition_penalty;
    }
    l[v] -= p.frequency_penalty * count;
    if (count > 0) l[v] -= p.presence_penalty;
  }
  return l;
}

int32_t ReferenceSample(const Case& c, uint64_t step) {
  const SamplingParams& p = c.params;
  const std::vector<float> l = ReferenceProcess(c);
  const int vocab = static_cast<int>(l.size());
  if (p.temperature == 0.f || p.top_k == 1) {
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  }
  // Probabilities of softmax(l / T), ranked by logit (ties: lower id first).
  std::vector<int32_t> rank(vocab);
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  double max_l = l[rank[0]], z = 0;
  std::vector<double> prob(vocab);
  for (int v = 0; v < vocab; ++v) z += prob[v] = std::exp((l[v] - max_l) / p.temperature);
  for (double& q : prob) q /= z;
  const double max_prob = prob[rank[0]];
  std::vector<bool> alive(vocab, true);
  for (int v = 0; v < vocab; ++v) alive[v] = prob[v] > 0 && prob[v] >= p.min_p * max_prob;
  alive[rank[0]] = true;
  for (int r = 0; r < vocab; ++r) {
    if (p.top_k > 0 && r >= p.top_k) alive[rank[r]] = false;
  }
  double alive_mass = 0;
  for (int v = 0; v < vocab; ++v) alive_mass += alive[v] ? prob[v] : 0;
  double mass = 0;
  bool reached = false;
  for (int r = 0; r < vocab; ++r) {
    const int32_t v = rank[r];
    if (!alive[v]) continue;
    if (reached) alive[v] = false;
    mass += prob[v] / alive_mass;
    if (p.top_p < 1.f && mass >= p.top_p) reached = true;
  }
  double total = 0;
  for (int v = 0; v < vocab; ++v) total += alive[v] ? prob[v] : 0;
  const double u = CounterUniform(p.seed, step) * total;
  double acc = 0;
  int32_t last = rank[0];
  for (int r = 0; r < vocab; ++r) {
    if (!alive[rank[r]]) continue;
    last = rank[r];
    acc += prob[last];
    if (u < acc) return last;
  }
  return last;
}

Case RandomCase(std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  auto pick = [&](int n) { return static_cast<int32_t>(rng() % n); };
  Case c;
  const int vocab = 2 + pick(60);
  c.logits.resize(vocab);
  for (float& x : c.logits) x = (unit(rng) - 0.5f) * 12.f;
  for (int i = pick(12); i > 0; --i) c.prompt.push_back(pick(vocab));
  for (int i = pick(10); i > 0; --i) c.output.push_back(pick(vocab));
  SamplingParams& p = c.params;
  p.temperature = pick(4) == 0 ? 0.f : 0.2f + 2.f * unit(rng);
  p.top_k = pick(3) == 0 ? pick(vocab) : 0;
  p.top_p = pick(3) == 0 ? 0.05f + 0.95f * unit(rng) : 1.f;
  p.seed = rng();
  p.min_p = pick(3) == 0 ? unit(rng) : 0.f;
  p.repetition_penalty = pick(2) == 0 ? 0.5f + 1.5f * unit(rng) : 1.f;
  p.presence_penalty = pick(2) == 0 ? 4.f * unit(rng) - 2.f : 0.f;
  p.frequency_penalty = pick(2) == 0 ? 4.f * unit(rng) - 2.f : 0.f;
  for (int i = pick(4); i > 0; --i)
    p.logit_bias.push_back({pick(vocab), 200.f * unit(rng) - 100.f});
  std::sort(p.logit_bias.begin(), p.logit_bias.end());
  p.logit_bias.erase(std::unique(p.logit_bias.begin(), p.logit_bias.end(),
                                 [](auto& a, auto& b) { return a.first == b.first; }),
                     p.logit_bias.end());
  p.min_tokens = pick(12);
  for (int i = pick(3); i > 0; --i) p.min_tokens_stop_ids.push_back(pick(vocab));
  return c;
}

TEST(SamplingTest, MatchesThePlainReferenceOnRandomLogits) {
  std::mt19937 rng(2024);
  int sampled_differently_from_greedy = 0;
  for (int n = 0; n < 3000; ++n) {
    const Case c = RandomCase(rng);
    ASSERT_TRUE(ValidateSamplingParams(c.params).ok());
    std::vector<int32_t> context = c.prompt;
    context.insert(context.end(), c.output.begin(), c.output.end());
    const TokenHistory h(context, static_cast<int64_t>(c.output.size()));
    const uint64_t step = c.output.size();
    const std::vector<float> got = ProcessLogits(c.logits, c.params, step, &h);
    const std::vector<float> want = ReferenceProcess(c);
    for (size_t v = 0; v < want.size(); ++v) {
      if (std::isinf(want[v])) {
        ASSERT_EQ(got[v], want[v]) << "case " << n << " token " << v;
      } else {
        ASSERT_NEAR(got[v], want[v], 1e-4f * std::max(1.f, std::abs(want[v])))
            << "case " << n << " token " << v;
      }
    }
    const int32_t token = SampleToken(c.logits, c.params, step, &h);
    ASSERT_EQ(token, ReferenceSample(c, step)) << "case " << n;
    sampled_differently_from_greedy += token != ArgMax(c.logits);
  }
  EXPECT_GT(sampled_differently_from_greedy, 500);  // the cases exercise more than argmax
}

// A real vocabulary is ranked a chunk at a time (model/sampling.cc RankedChunks); flat
// distributions over thousands of tokens, with ties, make draws reach deep into the ranking, so
// every chunk boundary is crossed, and the token must still be the plain reference's.
TEST(SamplingTest, MatchesThePlainReferenceDeepInALargeFlatVocabulary) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  int deep = 0;
  for (int n = 0; n < 200; ++n) {
    Case c;
    const int vocab = 3000 + static_cast<int>(rng() % 3000);
    c.logits.resize(vocab);
    // Coarse values: many exact ties (ranked by lower id).
    for (float& x : c.logits) x = std::round(unit(rng) * 40.f) / 10.f;
    SamplingParams& p = c.params;
    p.temperature = 0.5f + 3.f * unit(rng);
    p.seed = rng();
    p.top_k = n % 4 == 1 ? 1 + static_cast<int32_t>(rng() % vocab) : 0;
    p.top_p = n % 4 == 2 ? 0.3f + 0.7f * unit(rng) : 1.f;
    p.min_p = n % 4 == 3 ? 0.2f * unit(rng) : 0.f;
    for (uint64_t step = 0; step < 5; ++step) {
      const int32_t token = SampleToken(c.logits, p, step);
      ASSERT_EQ(token, ReferenceSample(c, step)) << "case " << n << " step " << step;
      // Ranked below the first chunks.
      int64_t above = 0;
      for (int v = 0; v < vocab; ++v) {
        above += c.logits[v] > c.logits[token] || (c.logits[v] == c.logits[token] && v < token);
      }
      deep += above >= 64 * 5;
    }
  }
  EXPECT_GT(deep, 200);  // most draws crossed at least two chunk boundaries
}

TEST(LogprobsTest, LogSoftmaxOfTheRawLogitsWithTheMostLikelyTokens) {
  const std::vector<float> logits = {1.f, 3.f, -2.f, 3.f, 0.5f};
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  const TokenLogprobs got = ComputeLogprobs(logits, 4, 3);
  EXPECT_NEAR(got.logprob, 0.5 - std::log(z), 1e-6);
  ASSERT_EQ(got.top.size(), 3u);
  // Most likely first, ties by lower id.
  EXPECT_EQ(got.top[0].first, 1);
  EXPECT_EQ(got.top[1].first, 3);
  EXPECT_EQ(got.top[2].first, 0);
  EXPECT_NEAR(got.top[0].second, 3.0 - std::log(z), 1e-6);
  EXPECT_NEAR(got.top[2].second, 1.0 - std::log(z), 1e-6);
  double mass = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    mass += std::exp(ComputeLogprobs(logits, i, 0).logprob);
  EXPECT_NEAR(mass, 1.0, 1e-6);
  EXPECT_TRUE(ComputeLogprobs(logits, 0, 0).top.empty());
  EXPECT_EQ(ComputeLogprobs(logits, 0, 99).top.size(), logits.size());
  // Large logits do not overflow.
  const std::vector<float> big = {1000.f, 999.f};
  EXPECT_NEAR(ComputeLogprobs(big, 0, 0).logprob, -std::log1p(std::exp(-1.0)), 1e-5);
}

TEST(SamplingTest, CounterUniformIsInTheUnitInterval) {
  double lo = 1, hi = 0, sum = 0;
  for (uint64_t s = 0; s < 10000; ++s) {
    const double u = CounterUniform(5, s);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace tandem
