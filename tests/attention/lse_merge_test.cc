#include "attention/lse_merge.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Dense softmax attention of one query over keys with scores s and values v (1-d values),
// returning (output, lse), in double precision: the reference the merge must reproduce.
std::pair<double, double> Dense(const std::vector<double>& s, const std::vector<double>& v) {
  if (s.empty()) return {0.0, -INFINITY};
  double m = s[0];
  for (double x : s) m = std::max(m, x);
  double z = 0, o = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    z += std::exp(s[i] - m);
    o += std::exp(s[i] - m) * v[i];
  }
  return {o / z, m + std::log(z)};
}

TEST(LseMergeTest, SinglePartialIsUnchanged) {
  const float o[] = {1.f, -2.f};
  const float l[] = {0.7f};
  const float* outs[] = {o};
  const float* lses[] = {l};
  float out[2], lse;
  MergeAttentionPartials(1, outs, lses, 1, 2, out, &lse);
  EXPECT_FLOAT_EQ(out[0], 1.f);
  EXPECT_FLOAT_EQ(out[1], -2.f);
  EXPECT_FLOAT_EQ(lse, 0.7f);
}

TEST(LseMergeTest, EqualLsesGiveThePlainMean) {
  const float a[] = {1.f}, b[] = {3.f}, la[] = {2.f}, lb[] = {2.f};
  const float* outs[] = {a, b};
  const float* lses[] = {la, lb};
  float out, lse;
  MergeAttentionPartials(2, outs, lses, 1, 1, &out, &lse);
  EXPECT_FLOAT_EQ(out, 2.f);
  EXPECT_NEAR(lse, 2.f + std::log(2.f), 1e-6);
}

TEST(LseMergeTest, DominantPartialWins) {
  const float a[] = {5.f}, b[] = {-7.f}, la[] = {100.f}, lb[] = {0.f};
  const float* outs[] = {a, b};
  const float* lses[] = {la, lb};
  float out, lse;
  MergeAttentionPartials(2, outs, lses, 1, 1, &out, &lse);
  EXPECT_FLOAT_EQ(out, 5.f);
  EXPECT_FLOAT_EQ(lse, 100.f);
}

TEST(LseMergeTest, NegInfPartialWithNaNOutputContributesNothing) {
  const float a[] = {kNaN, kNaN}, b[] = {4.f, 5.f}, la[] = {kNegInf}, lb[] = {1.5f};
  const float* outs[] = {a, b};
  const float* lses[] = {la, lb};
  float out[2], lse;
  MergeAttentionPartials(2, outs, lses, 1, 2, out, &lse);
  EXPECT_FLOAT_EQ(out[0], 4.f);
  EXPECT_FLOAT_EQ(out[1], 5.f);
  EXPECT_FLOAT_EQ(lse, 1.5f);

  // The in-place form: rank 0 (−inf, NaN) must become exact zeros.
  float mine[2] = {kNaN, kNaN};
  const float all[] = {kNegInf, 1.5f};
  float merged;
  CorrectPartialInPlace(2, 0, all, 1, 2, mine, &merged);
  EXPECT_EQ(mine[0], 0.f);
  EXPECT_EQ(mine[1], 0.f);
  EXPECT_FLOAT_EQ(merged, 1.5f);
}

TEST(LseMergeTest, AllNegInfGivesZerosAndNegInf) {
  const float a[] = {kNaN}, b[] = {3.f}, la[] = {kNegInf}, lb[] = {kNegInf};
  const float* outs[] = {a, b};
  const float* lses[] = {la, lb};
  float out, lse;
  MergeAttentionPartials(2, outs, lses, 1, 1, &out, &lse);
  EXPECT_EQ(out, 0.f);
  EXPECT_EQ(lse, kNegInf);
  float mine[1] = {3.f};
  const float all[] = {kNegInf, kNegInf};
  float merged;
  CorrectPartialInPlace(2, 1, all, 1, 1, mine, &merged);
  EXPECT_EQ(mine[0], 0.f);
  EXPECT_EQ(merged, kNegInf);
}

// Random keys split across N partials: both merge forms reproduce the dense softmax.
TEST(LseMergeTest, MergeOfSplitsEqualsDenseSoftmax) {
  std::mt19937 rng(7);
  std::normal_distribution<double> dist(0.0, 3.0);
  for (int32_t n : {1, 2, 3, 4, 8}) {
    for (int trial = 0; trial < 50; ++trial) {
      const int keys = trial % 20;  // includes 0 keys and partials with no keys
      std::vector<double> s(keys), v(keys);
      for (int k = 0; k < keys; ++k) s[k] = dist(rng), v[k] = dist(rng);
      const auto [ref_o, ref_l] = Dense(s, v);
      std::vector<float> po(n), pl(n);
      for (int32_t i = 0; i < n; ++i) {
        std::vector<double> si, vi;
        for (int k = i; k < keys; k += n) si.push_back(s[k]), vi.push_back(v[k]);
        const auto [o, l] = Dense(si, vi);
        po[i] = si.empty() ? kNaN : static_cast<float>(o);
        pl[i] = static_cast<float>(l);
      }
      std::vector<const float*> outs(n), lses(n);
      for (int32_t i = 0; i < n; ++i) outs[i] = &po[i], lses[i] = &pl[i];
      float out, lse;
      MergeAttentionPartials(n, outs.data(), lses.data(), 1, 1, &out, &lse);
      float sum = 0.f;
      for (int32_t i = 0; i < n; ++i) {
        float mine = po[i];
        CorrectPartialInPlace(n, i, pl.data(), 1, 1, &mine, nullptr);
        sum += mine;
      }
      if (keys == 0) {
        EXPECT_EQ(out, 0.f);
        EXPECT_EQ(lse, kNegInf);
        EXPECT_EQ(sum, 0.f);
      } else {
        EXPECT_NEAR(out, ref_o, 1e-5 * (1 + std::abs(ref_o)));
        EXPECT_NEAR(sum, ref_o, 1e-5 * (1 + std::abs(ref_o)));
        EXPECT_NEAR(lse, ref_l, 1e-5 * (1 + std::abs(ref_l)));
      }
    }
  }
}

}  // namespace
}  // namespace tandem
