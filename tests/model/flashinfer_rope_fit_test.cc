// FitFlashInferRopeScaling (model/cuda/flashinfer_rope_fit.h) and FlashInfer's RoPE arithmetic
// (attention/cuda/flashinfer/fi_rope_scaling.h) on the CPU: which rope_freq_factors FlashInfer's
// RoPE reproduces, and — for those — FlashInfer's rotation emulated element by element (its pair
// indexing, its float parameters and frequencies, its float angle) against Tandem's CPU RoPE.
//
// Bound of the emulation vs Tandem's RoPE (double angles, float cos/sin table): per element,
// (|x_j| + |x_partner|) · (pos · f'_i · 2^-18 + 2^-20) — the fit's frequency tolerance (2^-19,
// doubled for the float angle's own rounding) times the angle, plus a few float roundings of
// the table and the products. sin/cos are taken in double here (FlashInfer's __sincosf is a GPU
// intrinsic; its error belongs to cuda_flashinfer_backend_ops_test's bound, not to the mapping).
#include "model/cuda/flashinfer_rope_fit.h"

#include <cmath>
#include <random>
#include <vector>

#include "attention/cuda/flashinfer/fi_rope_scaling.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_ops.h"
#include "model/format/rope_scaling.h"

namespace tandem::gpu {
namespace {

std::vector<float> Llama3(int32_t head_dim, float theta, float factor, int32_t original) {
  Llama3RopeScaling s;
  s.factor = factor;
  s.original_max_position = original;
  absl::StatusOr<std::vector<float>> f = Llama3RopeFreqFactors(head_dim, theta, s);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *f : std::vector<float>();
}

// FlashInfer's RoPE of one row of `heads` heads, element by element as its kernel forms it.
std::vector<float> EmulateFlashInfer(const std::vector<float>& x, int32_t heads, int32_t d,
                                     int64_t pos, float theta, bool interleave,
                                     const FiRopeScaling& scaling) {
  const FiRopeKernelParams p = FiRopeKernelParamsOf(scaling);
  std::vector<float> out(x.size());
  for (int32_t h = 0; h < heads; ++h) {
    const float* v = x.data() + h * d;
    for (int32_t j = 0; j < d; ++j) {
      const int32_t i = FiRopePairOf(j, d, interleave);
      const auto base = static_cast<float>(std::pow(1.0 / theta, 2.0 * i / d));
      const float embed = static_cast<float>(pos) * FiRopeScaledFrequency(base, p);
      const double c = std::cos(static_cast<double>(embed)), s = std::sin(embed);
      float partner;  // the value rotated into element j, with its sign
      if (interleave) {
        partner = j % 2 == 0 ? -v[j + 1] : v[j - 1];
      } else {
        partner = j < d / 2 ? -v[j + d / 2] : v[j - d / 2];
      }
      out[h * d + j] = static_cast<float>(v[j] * c + partner * s);
    }
  }
  return out;
}

// FlashInfer's emulated RoPE equals Tandem's CPU RoPE with the same divisors, both styles, over
// positions up to max_position (128k for Llama 3.1's context).
void ExpectRotationsMatch(const std::vector<float>& factors, int32_t d, float theta,
                          int64_t max_position = 40000) {
  absl::StatusOr<FiRopeScaling> fit = FitFlashInferRopeScaling(factors.data(), d, theta);
  ASSERT_TRUE(fit.ok()) << fit.status();
  const FiRopeKernelParams p = FiRopeKernelParamsOf(*fit);
  const int32_t heads = 3;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(heads * d);
  for (float& v : x) v = u(rng);
  std::vector<int64_t> positions = {0, 1, 7, 1000, 8191, 8192, max_position};
  cpu::RopeTable table;
  table.Ensure(max_position, d, theta, factors.data());
  for (bool interleave : {true, false}) {
    for (int64_t pos : positions) {
      std::vector<float> ours = x;
      cpu::Rope(ours.data(), 1, heads, d, &pos,
                interleave ? RopeStyle::kAdjacentPairs : RopeStyle::kRotateHalf, table);
      const std::vector<float> theirs =
          EmulateFlashInfer(x, heads, d, pos, theta, interleave, *fit);
      for (int32_t h = 0; h < heads; ++h) {
        for (int32_t j = 0; j < d; ++j) {
          const int32_t i = FiRopePairOf(j, d, interleave);
          const int32_t partner = interleave ? (j ^ 1) : (j + d / 2) % d;
          const auto base = static_cast<float>(std::pow(1.0 / theta, 2.0 * i / d));
          const double f = FiRopeScaledFrequency(base, p);
          const double bound = (std::abs(x[h * d + j]) + std::abs(x[h * d + partner])) *
                               (pos * f * 0x1p-18 + 0x1p-20);
          ASSERT_NEAR(theirs[h * d + j], ours[h * d + j], bound)
              << "interleave " << interleave << " pos " << pos << " head " << h << " element " << j;
        }
      }
    }
  }
}

TEST(FlashInferRopeFitTest, Llama31RecoversItsParametersAndMatchesOurRope) {
  // Llama 3.1 8B: head_dim 128, theta 500000, factor 8, low 1, high 4, original 8192.
  const std::vector<float> f = Llama3(128, 500000.f, 8.f, 8192);
  absl::StatusOr<FiRopeScaling> fit = FitFlashInferRopeScaling(f.data(), 128, 500000.f);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->llama31);
  EXPECT_EQ(fit->rope_scale, 8.f);
  EXPECT_EQ(fit->low_freq_factor, 1.f);
  EXPECT_NEAR(fit->high_freq_factor, 4.f, 4e-4);
  EXPECT_NEAR(fit->old_context_length, 8192.f, 1.f);
  ExpectRotationsMatch(f, 128, 500000.f, 131071);
}

TEST(FlashInferRopeFitTest, Llama32AndOtherRampsMatchOurRope) {
  ExpectRotationsMatch(Llama3(64, 500000.f, 32.f, 8192), 64, 500000.f);  // Llama 3.2 1B/3B
  ExpectRotationsMatch(Llama3(128, 500000.f, 8.f, 4096), 128, 500000.f);
  ExpectRotationsMatch(Llama3(256, 10000.f, 4.f, 2048), 256, 10000.f);
  // A ramp one pair wide and none at all (a step): still FlashInfer's shape.
  for (const int32_t original : {64, 100, 1000}) {
    Llama3RopeScaling s;
    s.factor = 4.f;
    s.low_freq_factor = 1.f;
    s.high_freq_factor = 1.2f;
    s.original_max_position = original;
    absl::StatusOr<std::vector<float>> f = Llama3RopeFreqFactors(64, 10000.f, s);
    ASSERT_TRUE(f.ok()) << f.status();
    SCOPED_TRACE(original);
    ExpectRotationsMatch(*f, 64, 10000.f);
  }
}

TEST(FlashInferRopeFitTest, LinearScalingAndIdentityNeedNoRamp) {
  const std::vector<float> linear(64, 4.f);
  absl::StatusOr<FiRopeScaling> fit = FitFlashInferRopeScaling(linear.data(), 128, 10000.f);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_FALSE(fit->llama31);
  EXPECT_EQ(fit->rope_scale, 4.f);
  ExpectRotationsMatch(linear, 128, 10000.f);
  const std::vector<float> ones(32, 1.f);
  fit = FitFlashInferRopeScaling(ones.data(), 64, 10000.f);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_FALSE(fit->llama31);
  EXPECT_EQ(fit->rope_scale, 1.f);
}

TEST(FlashInferRopeFitTest, RefusesWhatFlashInferCannotExpress) {
  // YaRN: the ramp is linear in the pair index, not in the frequency.
  YarnRopeScaling y;
  y.factor = 4.f;
  y.original_max_position = 4096;
  absl::StatusOr<YarnRope> yarn = YarnRopeParams(128, 10000.f, y);
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  absl::StatusOr<FiRopeScaling> fit =
      FitFlashInferRopeScaling(yarn->freq_factors.data(), 128, 10000.f);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fit.status().message().rfind(
                "rope_freq_factors are not a ramp FlashInfer's RoPE can apply (Llama 3's or "
                "linear scaling): ",
                0),
            0u)
      << fit.status();

  // Llama 3's divisors with one ramp pair moved by 0.1 %.
  std::vector<float> f = Llama3(128, 500000.f, 8.f, 8192);
  int32_t ramp = -1;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] > 1.f && f[i] < 8.f) ramp = static_cast<int32_t>(i);
  }
  ASSERT_GE(ramp, 0);
  f[ramp - 1] *= 1.001f;
  fit = FitFlashInferRopeScaling(f.data(), 128, 500000.f);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument) << "perturbed ramp";

  // Divisors below 1 (frequencies raised), and a ramp falling with the frequency.
  std::vector<float> up(32, 1.f);
  up[3] = 0.5f;
  fit = FitFlashInferRopeScaling(up.data(), 64, 10000.f);
  EXPECT_EQ(fit.status().message(),
            "rope_freq_factors divide some frequency by less than 1 (FlashInfer only lowers "
            "frequencies)");
  std::vector<float> falling(32, 1.f);
  for (int32_t i = 0; i < 8; ++i) falling[i] = 4.f - 0.3f * i;  // high frequencies slowed most
  fit = FitFlashInferRopeScaling(falling.data(), 64, 10000.f);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);

  const float bad[2] = {1.f, 0.f};
  EXPECT_EQ(FitFlashInferRopeScaling(bad, 4, 10000.f).status().message(),
            "rope_freq_factors[1] = 0 is not a positive finite divisor");
  EXPECT_EQ(FitFlashInferRopeScaling(nullptr, 4, 10000.f).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FlashInferRopeFitTest, PairIndexingFollowsTheStyles) {
  static_assert(FiRopePairOf(0, 64, true) == 0 && FiRopePairOf(1, 64, true) == 0);
  static_assert(FiRopePairOf(63, 64, true) == 31);
  static_assert(FiRopePairOf(31, 64, false) == 31 && FiRopePairOf(32, 64, false) == 0);
  for (int32_t j = 0; j < 128; ++j) {
    EXPECT_EQ(FiRopePairOf(j, 128, true), j / 2);
    EXPECT_EQ(FiRopePairOf(j, 128, false), j < 64 ? j : j - 64);
  }
}

}  // namespace
}  // namespace tandem::gpu
