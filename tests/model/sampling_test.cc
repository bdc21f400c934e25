#include "model/sampling.h"

#include <cmath>
#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
