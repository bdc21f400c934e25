// FlashInfer's merge_state, RMSNorm, fused add + RMSNorm and RoPE behind Tandem's wrappers
// (attention/cuda/flashinfer/flashinfer_attention.h) against double-precision CPU references.
// Skipped visibly without a GPU or without FlashInfer in the binary.
//
// Derived tolerances (ε = 2^-23):
// * merge: Tandem's CPU merge (lse_merge.h) is the reference; FlashInfer's ex2/lg2.approx
//   (relative error < 2^-21 = 4ε) and its pairwise order replace expf/logf, so the bound is
//   4 × Fp32MergeBound (cuda_test_util.h) per merge step, n − 1 steps.
// * RMSNorm: FlashInfer sums n squares in float (≤ n·ε relative for any order) and uses rsqrt
//   (≤ 2 ulp); so |Δy| ≤ |x·w| / rms · (n/2 + 4)·ε, with margin 2.
// * RoPE: the angle pos·θ^(−2i/d) is formed with __powf (relative error ≤ 2^-21 on these
//   arguments) and rotated with __sincosf (absolute error ≤ 2^-21.4 for |angle| ≤ π, growing
//   about linearly beyond); so |Δ| ≤ (|x_a| + |x_b|)·2^-19·(1 + |angle|), angles kept ≤ 64.
#include <cmath>
#include <random>
#include <vector>

#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "attention/lse_merge.h"
#include "gtest/gtest.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/attention/cuda/flashinfer_cuda_test.h"

namespace tandem {
namespace {

using testing::DeviceArray;

class CudaFlashInferOpsTest : public testing::FlashInferCudaTest {
 protected:
  std::vector<float> Random(size_t n, float scale) {
    std::normal_distribution<float> dist(0.f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  std::mt19937_64 rng_{77};
};

TEST_F(CudaFlashInferOpsTest, MergeMatchesTheCpuMergeIncludingEmptyPartials) {
  for (int32_t n : {1, 2, 4}) {
    for (int32_t d : {64, 128}) {
      const int64_t items = 37;
      std::vector<float> outs = Random(n * items * d, 1.f);
      std::vector<float> lses = Random(n * items, 3.f);
      for (int64_t it = 0; it < items; it += 5) {
        for (int32_t i = 0; i < n; ++i) {
          if (it % 10 == 0 || i == 0) {
            lses[i * items + it] = -INFINITY;  // empty partial: Tandem's kernels write 0
            for (int32_t x = 0; x < d; ++x) outs[(i * items + it) * d + x] = 0.f;
          }
        }
      }
      std::vector<const float*> po, pl;
      for (int32_t i = 0; i < n; ++i) {
        po.push_back(outs.data() + i * items * d);
        pl.push_back(lses.data() + i * items);
      }
      std::vector<float> want(items * d), want_lse(items);
      MergeAttentionPartials(n, po.data(), pl.data(), items, d, want.data(), want_lse.data());
      DeviceArray<float> dout(outs), dlse(lses), got(items * d), got_lse(items);
      DeviceArray<float> scratch(gpu::FlashInferMergeScratchFloats(n, items));
      const absl::Status s = gpu::LaunchFlashInferMerge(
          n, dout.get(), dlse.get(), items, d, got.get(), got_lse.get(), scratch.get(), nullptr);
      ASSERT_TRUE(s.ok()) << s;
      testing::SyncDevice();
      const std::vector<float> g = got.Download(), gl = got_lse.Download();
      for (int64_t it = 0; it < items; ++it) {
        if (want_lse[it] == -INFINITY) {
          ASSERT_EQ(gl[it], -INFINITY) << "n=" << n << " item " << it;
          for (int32_t x = 0; x < d; ++x) ASSERT_EQ(g[it * d + x], 0.f);
          continue;
        }
        const double steps = std::max(1, n - 1);
        ASSERT_NEAR(gl[it], want_lse[it],
                    4 * steps * testing::Fp32MergeBound(n, want_lse[it], 1.0));
        for (int32_t x = 0; x < d; ++x) {
          ASSERT_NEAR(g[it * d + x], want[it * d + x],
                      4 * steps * testing::Fp32MergeBound(n, want_lse[it], 4.0))
              << "n=" << n << " item " << it << " dim " << x;
        }
      }
    }
  }
  EXPECT_EQ(
      gpu::LaunchFlashInferMerge(2, nullptr, nullptr, 1, 40, nullptr, nullptr, nullptr, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaFlashInferOpsTest, RmsNormAndFusedAddRmsNorm) {
  const int64_t m = 5, n = 576;  // SmolLM2's hidden size
  const float eps = 1e-5f;
  const std::vector<float> x = Random(m * n, 2.f), w = Random(n, 1.f), res = Random(m * n, 1.f);
  auto reference = [&](const std::vector<float>& in, std::vector<double>& y,
                       std::vector<double>& mag) {
    y.assign(m * n, 0);
    mag.assign(m * n, 0);
    for (int64_t i = 0; i < m; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += double{in[i * n + j]} * in[i * n + j];
      const double r = 1.0 / std::sqrt(ss / n + eps);
      for (int64_t j = 0; j < n; ++j) {
        y[i * n + j] = in[i * n + j] * r * w[j];
        mag[i * n + j] = std::abs(y[i * n + j]);
      }
    }
  };
  const double rel = 2 * (n / 2.0 + 4) * 0x1p-23;
  std::vector<double> want, mag;
  reference(x, want, mag);
  DeviceArray<float> dx(x), dw(w), dy(m * n);
  ASSERT_TRUE(gpu::LaunchFlashInferRmsNorm(dx.get(), dw.get(), m, n, eps, dy.get(), nullptr).ok());
  testing::SyncDevice();
  std::vector<float> y = dy.Download();
  for (int64_t i = 0; i < m * n; ++i) ASSERT_NEAR(y[i], want[i], rel * mag[i] + 1e-30) << i;

  // Fused: residual += x; x = rmsnorm(residual)·w.
  std::vector<float> sum(m * n);
  for (int64_t i = 0; i < m * n; ++i) sum[i] = x[i] + res[i];
  reference(sum, want, mag);
  DeviceArray<float> dres(res);
  ASSERT_TRUE(
      gpu::LaunchFlashInferAddRmsNorm(dx.get(), dres.get(), dw.get(), m, n, eps, nullptr).ok());
  testing::SyncDevice();
  const std::vector<float> got_res = dres.Download(), got_x = dx.Download();
  for (int64_t i = 0; i < m * n; ++i) {
    ASSERT_EQ(got_res[i], sum[i]) << "residual " << i;  // one float add, as on the CPU
    ASSERT_NEAR(got_x[i], want[i], rel * mag[i] + 1e-30) << i;
  }
  EXPECT_EQ(gpu::LaunchFlashInferRmsNorm(dx.get(), dw.get(), m, 6, eps, dy.get(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaFlashInferOpsTest, RopeBothStyles) {
  const int64_t m = 6;
  const int32_t hq = 3, hk = 1, d = 64;
  const float theta = 10000.f;
  const std::vector<int32_t> pos = {0, 1, 5, 17, 40, 63};
  for (const bool adjacent : {true, false}) {
    const std::vector<float> q = Random(m * hq * d, 1.f), k = Random(m * hk * d, 1.f);
    DeviceArray<float> dq(q), dk(k);
    DeviceArray<int32_t> dpos(pos);
    ASSERT_TRUE(gpu::LaunchFlashInferRope(dq.get(), dk.get(), m, hq, hk, d, dpos.get(), theta,
                                          adjacent, nullptr)
                    .ok());
    testing::SyncDevice();
    auto check = [&](const std::vector<float>& in, const std::vector<float>& got, int32_t heads) {
      for (int64_t r = 0; r < m; ++r) {
        for (int32_t h = 0; h < heads; ++h) {
          const float* x = in.data() + (r * heads + h) * d;
          const float* y = got.data() + (r * heads + h) * d;
          for (int32_t i = 0; i < d / 2; ++i) {
            const int32_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + d / 2;
            const double angle = pos[r] * std::pow(double{theta}, -2.0 * i / d);
            const double ya = x[a] * std::cos(angle) - x[b] * std::sin(angle);
            const double yb = x[b] * std::cos(angle) + x[a] * std::sin(angle);
            const double tol = (std::abs(x[a]) + std::abs(x[b])) * 0x1p-19 * (1 + angle);
            ASSERT_NEAR(y[a], ya, tol) << "row " << r << " head " << h << " pair " << i;
            ASSERT_NEAR(y[b], yb, tol) << "row " << r << " head " << h << " pair " << i;
          }
        }
      }
    };
    check(q, dq.Download(), hq);
    check(k, dk.Download(), hk);
  }
}

}  // namespace
}  // namespace tandem
