// LaunchMergePartials and LaunchCorrectPartial against the CPU MergeAttentionPartials and
// CorrectPartialInPlace (attention/lse_merge.h) on random partials, including the cases the
// contract singles out: partials with LSE −inf whose outputs are NaN (must contribute nothing)
// and items where every partial is −inf (output exactly 0, LSE exactly −inf).
//
// Tolerance: |gpu − cpu| <= Fp32MergeBound(n, merged LSE, magnitude) (cuda_test_util.h) per
// element and per LSE: both compute the same float expressions in the same order with the same
// MergeLse, so only expf/logf ulps (CUDA vs glibc) differ, amplified by |LSE| (here up to ~20)
// through exp(L_i − L). magnitude: 1 for an LSE, max_i |o_i| over non-empty partials for a
// merged output, |x| for a corrected output x. An infinite expected value must match exactly.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/cuda/cuda_attention.h"
#include "attention/lse_merge.h"
#include "gtest/gtest.h"
#include "tests/attention/cuda/cuda_test_util.h"

namespace tandem {
namespace {

using testing::CudaTest;
using testing::DeviceArray;

struct Partials {
  std::vector<float> out;  // [n][items][d]
  std::vector<float> lse;  // [n][items]
};

// LSEs spread over ±20 with about a quarter −inf (outputs NaN there), and a few items where
// every partial is −inf.
Partials MakePartials(int32_t n, int64_t items, int32_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> spread(-20.f, 20.f);
  Partials p;
  p.out.resize(n * items * d);
  p.lse.resize(n * items);
  for (float& x : p.out) x = normal(rng);
  for (int64_t it = 0; it < items; ++it) {
    const bool all_empty = it % 17 == 5;
    for (int32_t i = 0; i < n; ++i) {
      const bool empty = all_empty || rng() % 4 == 0;
      p.lse[i * items + it] = empty ? -INFINITY : spread(rng);
      if (empty) {
        for (int32_t x = 0; x < d; ++x) p.out[(i * items + it) * d + x] = std::nanf("");
      }
    }
  }
  return p;
}

// Per element i of `want`: |got − want| <= Fp32MergeBound(n, lse[i / per_item], magnitude[i]).
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, int32_t n,
                const std::vector<float>& lse, int32_t per_item,
                const std::vector<double>& magnitude, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(magnitude.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      ASSERT_EQ(got[i], want[i]) << what << " index " << i;
    } else {
      ASSERT_NEAR(got[i], want[i], testing::Fp32MergeBound(n, lse[i / per_item], magnitude[i]))
          << what << " index " << i;
    }
  }
}

// max_i |o_i[x]| over the partials with a finite LSE, per (item, x): the scale of a merged output.
std::vector<double> MergedMagnitude(const Partials& p, int32_t n, int64_t items, int32_t d) {
  std::vector<double> m(items * d, 0.0);
  for (int32_t i = 0; i < n; ++i) {
    for (int64_t it = 0; it < items; ++it) {
      if (p.lse[i * items + it] == -INFINITY) continue;
      for (int32_t x = 0; x < d; ++x) {
        m[it * d + x] = std::max(m[it * d + x], double{std::abs(p.out[(i * items + it) * d + x])});
      }
    }
  }
  return m;
}

std::vector<double> AbsOf(const std::vector<float>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(double{v[i]});
  return a;
}

class CudaLseMergeTest : public CudaTest {};

TEST_F(CudaLseMergeTest, MergeMatchesCpu) {
  for (int32_t n : {1, 2, 3, 5, 8}) {
    for (int32_t d : {1, 64, 130}) {
      const int64_t items = 301;
      SCOPED_TRACE("n=" + std::to_string(n) + " d=" + std::to_string(d));
      const Partials p = MakePartials(n, items, d, 100 * n + d);
      std::vector<const float*> outs, lses;
      for (int32_t i = 0; i < n; ++i) {
        outs.push_back(p.out.data() + i * items * d);
        lses.push_back(p.lse.data() + i * items);
      }
      std::vector<float> cpu_out(items * d), cpu_lse(items);
      MergeAttentionPartials(n, outs.data(), lses.data(), items, d, cpu_out.data(), cpu_lse.data());
      DeviceArray<float> dout(p.out), dlse(p.lse), merged(items * d), merged_lse(items);
      merged.Fill(0xff);
      ASSERT_TRUE(gpu::LaunchMergePartials(n, dout.get(), dlse.get(), items, d, merged.get(),
                                           merged_lse.get(), nullptr)
                      .ok());
      testing::SyncDevice();
      const std::vector<double> magnitude = MergedMagnitude(p, n, items, d);
      const std::vector<double> ones(items, 1.0);
      ExpectNear(merged.Download(), cpu_out, n, cpu_lse, d, magnitude, "output");
      ExpectNear(merged_lse.Download(), cpu_lse, n, cpu_lse, 1, ones, "lse");
      // lse_out is optional.
      ASSERT_TRUE(gpu::LaunchMergePartials(n, dout.get(), dlse.get(), items, d, merged.get(),
                                           nullptr, nullptr)
                      .ok());
      testing::SyncDevice();
      ExpectNear(merged.Download(), cpu_out, n, cpu_lse, d, magnitude, "output without lse");
    }
  }
}

TEST_F(CudaLseMergeTest, CorrectPartialMatchesCpu) {
  for (int32_t n : {1, 2, 4, 7}) {
    const int32_t d = 64;
    const int64_t items = 257;
    const Partials p = MakePartials(n, items, d, 7 + n);
    DeviceArray<float> dlse(p.lse);
    for (int32_t me = 0; me < n; ++me) {
      SCOPED_TRACE("n=" + std::to_string(n) + " me=" + std::to_string(me));
      std::vector<float> cpu(p.out.begin() + me * items * d, p.out.begin() + (me + 1) * items * d);
      DeviceArray<float> gpu_out(cpu);
      std::vector<float> cpu_lse(items);
      CorrectPartialInPlace(n, me, p.lse.data(), items, d, cpu.data(), cpu_lse.data());
      DeviceArray<float> gpu_lse(items);
      ASSERT_TRUE(gpu::LaunchCorrectPartial(n, me, dlse.get(), items, d, gpu_out.get(),
                                            gpu_lse.get(), nullptr)
                      .ok());
      testing::SyncDevice();
      ExpectNear(gpu_out.Download(), cpu, n, cpu_lse, d, AbsOf(cpu), "corrected output");
      ExpectNear(gpu_lse.Download(), cpu_lse, n, cpu_lse, 1, std::vector<double>(items, 1.0),
                 "merged lse");
    }
  }
}

TEST_F(CudaLseMergeTest, ZeroItemsLaunchNothing) {
  EXPECT_TRUE(gpu::LaunchMergePartials(3, nullptr, nullptr, 0, 64, nullptr, nullptr, nullptr).ok());
  EXPECT_TRUE(gpu::LaunchCorrectPartial(3, 1, nullptr, 0, 64, nullptr, nullptr, nullptr).ok());
  const absl::Status s =
      gpu::LaunchMergePartials(0, nullptr, nullptr, 4, 64, nullptr, nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("needs n >= 1"), std::string::npos) << s;
}

}  // namespace
}  // namespace tandem
