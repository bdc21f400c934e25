// The CUDA backend's RMSNorm, fused add + RMSNorm, RoPE (f32 and bf16) and DCP correction on
// the FlashInfer path
// (model/cuda/flashinfer_ops.h) against the CPU backend / CPU correction, directly (checking the
// FlashInfer kernel ran, and that unsupported shapes fall back) and through CreateCudaBackend
// with TANDEM_CUDA_ATTENTION=flashinfer. Skipped visibly without a GPU or without FlashInfer.
//
// Derived tolerances (ε = 2^-23), as in tests/attention/cuda/cuda_flashinfer_ops_test.cc:
// * RMSNorm: FlashInfer sums n squares in float (≤ n·ε relative) and uses rsqrt (≤ 2 ulp), the
//   CPU sums in double: |Δy| ≤ |x·w| / rms · (n/2 + 4)·ε, margin 2.
// * RoPE: angle pos·θ^(−2i/d) from __powf (≤ 2^-21 relative) rotated by __sincosf (≤ 2^-21.4
//   absolute for |angle| ≤ π, growing about linearly): |Δ| ≤ (|x_a| + |x_b|)·2^-19·(1 + angle),
//   angles kept ≤ 64 (Llama 3.1's divisors: up to 60000 for the unscaled pairs, where the bound
//   is loose, ~60 on the ramp). bf16: the CPU rotates the bf16-rounded input; the output's rounding
//   adds half an ulp, 2^-8·|y|.
// * Correction: one FlashInfer merge step (ex2/lg2.approx, < 2^-21 relative) after our base-2
//   LSEs: 4 × Fp32MergeBound (cuda_test_util.h) with magnitude |out|.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "attention/lse_merge.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_backend.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/flashinfer_ops.h"
#include "model/format/rope_scaling.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/attention/cuda/flashinfer_cuda_test.h"
#include "tests/model/cuda/backend_test_util.h"

namespace tandem {
namespace {

using gpu::FiOp;
using gpu::FlashInferOps;
using testing::DeviceArray;
using testing::RandomFloats;

constexpr double kEps = 0x1p-23;

uint16_t ToBf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f = 0;
  std::memcpy(&f, &u, 4);
  return f;
}

class CudaFlashInferBackendOpsTest : public testing::FlashInferCudaTest {
 protected:
  void SetUp() override {
    testing::FlashInferCudaTest::SetUp();
    if (IsSkipped()) return;
    cpu_ = CreateCpuBackend();
  }

  // CPU RMSNorm vs FlashInferOps, in place.
  void CheckRmsNorm(FlashInferOps& ops, int64_t m, int64_t n) {
    const std::vector<float> x = RandomFloats(m * n, m + n, 3.f), w = RandomFloats(n, 7);
    std::vector<float> want(m * n);
    ASSERT_TRUE(cpu_->RmsNorm(x.data(), w.data(), m, n, 1e-5f, want.data()).ok());
    DeviceArray<float> dx(x), dw(w);
    ASSERT_TRUE(ops.RmsNorm(dx.get(), dw.get(), m, n, 1e-5f, dx.get(), nullptr).ok());
    const std::vector<float> got = dx.Download();
    for (int64_t r = 0; r < m; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += double(x[r * n + j]) * x[r * n + j];
      const double rms = std::sqrt(ss / n + 1e-5);
      for (int64_t j = 0; j < n; ++j) {
        const double tol = std::abs(x[r * n + j] * w[j]) / rms * (n / 2.0 + 4) * kEps * 2 + 1e-30;
        ASSERT_NEAR(got[r * n + j], want[r * n + j], tol) << "m " << m << " n " << n << " r " << r;
      }
    }
  }

  // CPU Add + RmsNorm vs FlashInferOps::AddRmsNorm, in place (out = x) or not: the residual
  // is one f32 add on both sides (exact), out within RMSNorm's bound over the new residual.
  void CheckAddRmsNorm(FlashInferOps& ops, int64_t m, int64_t n, bool in_place) {
    const std::vector<float> x = RandomFloats(m * n, m + n, 3.f), w = RandomFloats(n, 7);
    const std::vector<float> res = RandomFloats(m * n, m * n + 1, 2.f);
    std::vector<float> want_res = res, want(m * n);
    ASSERT_TRUE(cpu_->Add(want_res.data(), x.data(), m * n).ok());
    ASSERT_TRUE(cpu_->RmsNorm(want_res.data(), w.data(), m, n, 1e-5f, want.data()).ok());
    DeviceArray<float> dx(x), dw(w), dres(res), dout(std::vector<float>(m * n));
    float* out = in_place ? dx.get() : dout.get();
    ASSERT_TRUE(ops.AddRmsNorm(dres.get(), dx.get(), dw.get(), m, n, 1e-5f, out, nullptr).ok());
    EXPECT_EQ(dres.Download(), want_res) << "residual, m " << m << " n " << n;
    const std::vector<float> got = in_place ? dx.Download() : dout.Download();
    for (int64_t r = 0; r < m; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += double(want_res[r * n + j]) * want_res[r * n + j];
      const double rms = std::sqrt(ss / n + 1e-5);
      for (int64_t j = 0; j < n; ++j) {
        const double tol =
            std::abs(want_res[r * n + j] * w[j]) / rms * (n / 2.0 + 4) * kEps * 2 + 1e-30;
        ASSERT_NEAR(got[r * n + j], want[r * n + j], tol)
            << "add+rmsnorm m " << m << " n " << n << " r " << r << " in place " << in_place;
      }
    }
  }

  // CPU RoPE vs FlashInferOps (f32 or bf16 activations), positions ≤ 60 unless given.
  void CheckRope(FlashInferOps& ops, bool bf16, RopeStyle style, int32_t heads, int32_t d,
                 const RopeParams& params, std::vector<int64_t> pos = {0, 1, 17, 60, 3}) {
    const int64_t m = static_cast<int64_t>(pos.size()), total = m * heads * d;
    std::vector<float> x = RandomFloats(total, heads * d + bf16);
    std::vector<uint16_t> x16(total);
    if (bf16) {
      for (int64_t i = 0; i < total; ++i) x[i] = FromBf16(x16[i] = ToBf16(x[i]));
    }
    std::vector<float> want = x;
    ASSERT_TRUE(cpu_->Rope(want.data(), m, heads, d, pos.data(), params).ok());
    DeviceArray<int64_t> dpos(pos);
    std::vector<float> got(total);
    if (bf16) {
      DeviceArray<uint16_t> dx(x16);
      ASSERT_TRUE(
          ops.Rope(reinterpret_cast<float*>(dx.get()), m, heads, d, dpos.get(), params, nullptr)
              .ok());
      const std::vector<uint16_t> g = dx.Download();
      for (int64_t i = 0; i < total; ++i) got[i] = FromBf16(g[i]);
    } else {
      DeviceArray<float> dx(x);
      ASSERT_TRUE(ops.Rope(dx.get(), m, heads, d, dpos.get(), params, nullptr).ok());
      got = dx.Download();
    }
    const int32_t half = d / 2;
    for (int64_t r = 0; r < m; ++r) {
      for (int32_t h = 0; h < heads; ++h) {
        const int64_t base = (r * heads + h) * d;
        for (int32_t i = 0; i < half; ++i) {
          const int64_t a = base + (style == RopeStyle::kAdjacentPairs ? 2 * i : i);
          const int64_t b = base + (style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half);
          const double angle = pos[r] * std::pow(double(params.theta), -2.0 * i / d);
          const double tol = (std::abs(x[a]) + std::abs(x[b])) * 0x1p-19 * (1 + angle);
          for (int64_t e : {a, b}) {
            // bf16: the output's rounding, half an ulp of the computed value.
            const double round = bf16 ? (std::abs(want[e]) + tol) * 0x1p-8 : 0.0;
            ASSERT_NEAR(got[e], want[e], tol + round)
                << "bf16 " << bf16 << " heads " << heads << " d " << d << " row " << r << " head "
                << h << " pair " << i;
          }
        }
      }
    }
  }

  void CheckCorrect(FlashInferOps& ops, int32_t n, int32_t me, int64_t items, int32_t d) {
    std::vector<float> lse = RandomFloats(n * items, items + d, 5.f);
    for (int64_t i = 0; i < n * items; i += 7) lse[i] = -INFINITY;
    for (int32_t j = 0; j < n; ++j) lse[j * items + 5] = -INFINITY;  // every partial empty
    std::vector<float> out = RandomFloats(items * d, 4);
    for (int64_t i = 0; i < items; ++i) {
      if (lse[me * items + i] == -INFINITY) {
        std::fill(out.begin() + i * d, out.begin() + (i + 1) * d, 0.f);  // as attention writes
      }
    }
    std::vector<float> want = out;
    CorrectPartialInPlace(n, me, lse.data(), items, d, want.data(), nullptr);
    DeviceArray<float> dl(lse), dout(out);
    ASSERT_TRUE(ops.CorrectPartial(n, me, dl.get(), items, d, dout.get(), nullptr).ok());
    const std::vector<float> got = dout.Download();
    for (int64_t i = 0; i < items; ++i) {
      const float merged = MergeLse(lse.data() + i, n, items);
      for (int32_t k = 0; k < d; ++k) {
        const int64_t e = i * d + k;
        ASSERT_NEAR(got[e], want[e], 4 * testing::Fp32MergeBound(n, merged, std::abs(out[e])))
            << "n " << n << " me " << me << " item " << i << " d " << d;
      }
    }
  }

  std::unique_ptr<ComputeBackend> cpu_;
};

constexpr absl::Duration kTimeout = absl::Minutes(1);

TEST_F(CudaFlashInferBackendOpsTest, RmsNormRunsFlashInferWhereSupported) {
  FlashInferOps ops(0, /*bf16=*/false, /*selected=*/true, kTimeout);
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 576}, {7, 1024}, {33, 4096}}) {
    CheckRmsNorm(ops, m, n);
  }
  EXPECT_EQ(ops.flashinfer_calls(FiOp::kRmsNorm), 3);
  CheckRmsNorm(ops, 3, 578);  // not a multiple of 4: Tandem's kernel (within the same bound)
  EXPECT_EQ(ops.flashinfer_calls(FiOp::kRmsNorm), 3);
}

TEST_F(CudaFlashInferBackendOpsTest, AddRmsNormRunsFusedAddRmsNormInPlace) {
  FlashInferOps ops(0, /*bf16=*/false, /*selected=*/true, kTimeout);
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 576}, {7, 1024}, {33, 4096}}) {
    CheckAddRmsNorm(ops, m, n, /*in_place=*/true);
  }
  EXPECT_EQ(ops.flashinfer_calls(FiOp::kAddRmsNorm), 3);
  // Not in place, or n not a multiple of 4: Tandem's fused kernel, within the same bound.
  CheckAddRmsNorm(ops, 7, 1024, /*in_place=*/false);
  CheckAddRmsNorm(ops, 3, 578, /*in_place=*/true);
  EXPECT_EQ(ops.flashinfer_calls(FiOp::kAddRmsNorm), 3);
}

TEST_F(CudaFlashInferBackendOpsTest, RopeRunsFlashInferInBothStylesAndBf16) {
  for (bool bf16 : {false, true}) {
    FlashInferOps ops(0, bf16, /*selected=*/true, kTimeout);
    int64_t calls = 0;
    for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
      for (int32_t d : {64, 128}) {
        for (int32_t heads : {2, 9}) {
          CheckRope(ops, bf16, style, heads, d, RopeParams{10000.f, style});
          EXPECT_EQ(ops.flashinfer_calls(FiOp::kRope), ++calls);
        }
      }
    }
    // Frequency factors FlashInfer reproduces (flashinfer_rope_fit.h): linear scaling
    // (rope_scale), and Llama 3.1 8B's divisors (BatchQKApplyLlama31RotaryPosIds) at positions
    // where the ramp's pairs turn by up to ~60 radians (the bound's angle is the unscaled one,
    // an upper bound).
    const std::vector<float> linear(32, 2.f);
    CheckRope(ops, bf16, RopeStyle::kRotateHalf, 4, 64,
              RopeParams{10000.f, RopeStyle::kRotateHalf, linear.data()});
    EXPECT_EQ(ops.flashinfer_calls(FiOp::kRope), ++calls);
    absl::StatusOr<std::vector<float>> llama31 =
        Llama3RopeFreqFactors(128, 500000.f, Llama3RopeScaling{});
    ASSERT_TRUE(llama31.ok()) << llama31.status();
    for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
      CheckRope(ops, bf16, style, 8, 128, RopeParams{500000.f, style, llama31->data()},
                {0, 1, 100, 8191, 20000, 60000});
      EXPECT_EQ(ops.flashinfer_calls(FiOp::kRope), ++calls);
    }
    // YaRN's divisors, and a single head, keep Tandem's kernel, which matches within the bound.
    absl::StatusOr<YarnRope> yarn = YarnRopeParams(64, 10000.f, YarnRopeScaling{});
    ASSERT_TRUE(yarn.ok()) << yarn.status();
    CheckRope(ops, bf16, RopeStyle::kRotateHalf, 4, 64,
              RopeParams{10000.f, RopeStyle::kRotateHalf, yarn->freq_factors.data()});
    CheckRope(ops, bf16, RopeStyle::kAdjacentPairs, 1, 64, RopeParams{});
    EXPECT_EQ(ops.flashinfer_calls(FiOp::kRope), calls);
  }
}

TEST_F(CudaFlashInferBackendOpsTest, CorrectPartialIsFlashInferMergeState) {
  FlashInferOps ops(0, /*bf16=*/false, /*selected=*/true, kTimeout);
  CheckCorrect(ops, 1, 0, 12, 64);
  CheckCorrect(ops, 3, 1, 40, 128);
  CheckCorrect(ops, 4, 3, 333, 64);  // odd items: one item per block; scratch grows
  EXPECT_EQ(ops.flashinfer_calls(FiOp::kCorrectPartial), 3);
  CheckCorrect(ops, 2, 0, 16, 80);  // head_dim 80: Tandem's kernel
  EXPECT_EQ(ops.flashinfer_calls(FiOp::kCorrectPartial), 3);
}

// The backend's own ops under TANDEM_CUDA_ATTENTION=flashinfer match the CPU backend.
TEST_F(CudaFlashInferBackendOpsTest, BackendOpsMatchCpu) {
  ASSERT_EQ(setenv("TANDEM_CUDA_ATTENTION", "flashinfer", 1), 0);
  absl::StatusOr<std::unique_ptr<ComputeBackend>> gpu = CreateCudaBackend(0);
  unsetenv("TANDEM_CUDA_ATTENTION");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ComputeBackend& g = **gpu;
  const int64_t m = 5, n = 256;
  const std::vector<float> x = RandomFloats(m * n, 11, 2.f), w = RandomFloats(n, 12);
  std::vector<float> want(m * n);
  ASSERT_TRUE(cpu_->RmsNorm(x.data(), w.data(), m, n, 1e-6f, want.data()).ok());
  auto bx = testing::Put(g, x), bw = testing::Put(g, w);
  ASSERT_TRUE(g.RmsNorm(bx->f32(), bw->f32(), m, n, 1e-6f, bx->f32()).ok());
  std::vector<float> got = testing::Get<float>(g, *bx, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(got[i], want[i],
                std::max(1.0, std::abs(double(want[i]))) * (n / 2.0 + 4) * kEps * 8)
        << "rmsnorm " << i;
  }
  // RoPE: 4 heads of 64 at positions ≤ 40 (angles ≤ 40).
  const std::vector<int64_t> pos = {0, 9, 40, 2, 31};
  const RopeParams params{10000.f, RopeStyle::kRotateHalf};
  want = x;
  ASSERT_TRUE(cpu_->Rope(want.data(), m, 4, 64, pos.data(), params).ok());
  auto br = testing::Put(g, x);
  ASSERT_TRUE(g.Rope(br->f32(), m, 4, 64, pos.data(), params).ok());
  got = testing::Get<float>(g, *br, x.size());
  double max_abs = 0;
  for (float v : x) max_abs = std::max(max_abs, std::abs(double(v)));
  for (size_t i = 0; i < x.size(); ++i) {
    // (|x_a| + |x_b|)·2^-19·(1 + angle) with |x_a| + |x_b| ≤ 2·max|x| and angle ≤ 40.
    ASSERT_NEAR(got[i], want[i], 2 * max_abs * 0x1p-19 * 41) << "rope " << i;
  }
  // Correction.
  const int32_t parts = 2, d = 64;
  const int64_t items = 24;
  const std::vector<float> lse = RandomFloats(parts * items, 13, 3.f);
  const std::vector<float> out = RandomFloats(items * d, 14);
  want = out;
  CorrectPartialInPlace(parts, 1, lse.data(), items, d, want.data(), nullptr);
  auto bl = testing::Put(g, lse), bo = testing::Put(g, out);
  ASSERT_TRUE(g.CorrectPartial(parts, 1, bl->f32(), items, d, bo->f32()).ok());
  got = testing::Get<float>(g, *bo, out.size());
  for (int64_t i = 0; i < items * d; ++i) {
    const float merged = MergeLse(lse.data() + i / d, parts, items);
    ASSERT_NEAR(got[i], want[i], 4 * testing::Fp32MergeBound(parts, merged, std::abs(out[i])))
        << "correction " << i;
  }
}

}  // namespace
}  // namespace tandem
