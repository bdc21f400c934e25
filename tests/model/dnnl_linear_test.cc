// DnnlLinear against a double-precision reference, for every epilogue. Tolerance: the GEMM is
// f32 with f32 accumulation, so |y − ref| <= 1e-5 · Σ_j |w_j·x_j| (+ the size of what the
// epilogue adds); a transposed, mis-strided or mis-fused GEMM misses this by orders of magnitude.
#include "model/cpu/dnnl_linear.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

struct Shape {
  int64_t m, n, k;
  bool bias;
};

class DnnlLinearTest : public ::testing::TestWithParam<DnnlLinear::Epilogue> {};

TEST_P(DnnlLinearTest, MatchesTheDoubleReference) {
  const DnnlLinear::Epilogue epilogue = GetParam();
  for (const Shape& s : std::vector<Shape>{
           {1, 576, 576, false}, {3, 33, 17, true}, {64, 49, 130, true}, {5, 1, 1, true}}) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                 " k=" + std::to_string(s.k) + " bias=" + std::to_string(s.bias));
    const std::vector<float> w = Random(s.n * s.k, s.n, 0.1f);
    const std::vector<float> x = Random(s.m * s.k, s.k);
    const std::vector<float> bias = Random(s.n, 99);
    const std::vector<float> aux = Random(s.m * s.n, 7, 2.f);
    absl::StatusOr<std::unique_ptr<DnnlLinear>> op =
        DnnlLinear::Create(w.data(), s.n, s.k, s.bias ? bias.data() : nullptr);
    ASSERT_TRUE(op.ok()) << op.status();
    std::vector<float> y = Random(s.m * s.n, 5);  // what kAccumulate adds to
    const std::vector<float> y0 = y;
    ASSERT_TRUE((*op)->Forward(x.data(), s.m, y.data(), epilogue, aux.data()).ok());
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t t = 0; t < s.k; ++t) {
          ref += double{x[i * s.k + t]} * w[j * s.k + t];
          mag += std::abs(double{x[i * s.k + t]} * w[j * s.k + t]);
        }
        if (s.bias) ref += bias[j];
        double tol = 1e-5 * mag + 1e-6 * std::max(1.0, std::abs(ref));
        switch (epilogue) {
          case DnnlLinear::Epilogue::kStore:
            break;
          case DnnlLinear::Epilogue::kAccumulate:
            ref += y0[i * s.n + j];
            tol += 1e-6 * std::abs(y0[i * s.n + j]);
            break;
          case DnnlLinear::Epilogue::kSiluMul: {
            const double a = aux[i * s.n + j];
            ref = ref / (1 + std::exp(-ref)) * a;
            tol = tol * std::abs(a) * 1.2 + 1e-6 * std::abs(ref);  // silu' <= 1.1
            break;
          }
        }
        ASSERT_NEAR(y[i * s.n + j], ref, tol) << "y[" << i << "][" << j << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Epilogues, DnnlLinearTest,
                         ::testing::Values(DnnlLinear::Epilogue::kStore,
                                           DnnlLinear::Epilogue::kAccumulate,
                                           DnnlLinear::Epilogue::kSiluMul),
                         [](const ::testing::TestParamInfo<DnnlLinear::Epilogue>& info) {
                           switch (info.param) {
                             case DnnlLinear::Epilogue::kStore:
                               return std::string("Store");
                             case DnnlLinear::Epilogue::kAccumulate:
                               return std::string("Accumulate");
                             case DnnlLinear::Epilogue::kSiluMul:
                               return std::string("SiluMul");
                           }
                           return std::string("Unknown");
                         });

TEST(DnnlLinearTest, SiluMulNeedsItsOwnAuxInput) {
  const std::vector<float> w(4 * 4, 0.5f), x(2 * 4, 1.f);
  absl::StatusOr<std::unique_ptr<DnnlLinear>> op = DnnlLinear::Create(w.data(), 4, 4, nullptr);
  ASSERT_TRUE(op.ok()) << op.status();
  std::vector<float> y(2 * 4, 3.f);
  const absl::Status missing =
      (*op)->Forward(x.data(), 2, y.data(), DnnlLinear::Epilogue::kSiluMul, nullptr);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument) << missing;
  const absl::Status aliased =
      (*op)->Forward(x.data(), 2, y.data(), DnnlLinear::Epilogue::kSiluMul, y.data());
  EXPECT_EQ(aliased.code(), absl::StatusCode::kInvalidArgument) << aliased;
  EXPECT_EQ(y, std::vector<float>(2 * 4, 3.f)) << "a rejected call must leave y untouched";
}

// The primitive cache is bounded: many distinct row counts (a prefill node sees a new one with
// almost every step) keep it at its capacity, two weights of one shape share entries, and a shape
// whose primitive was evicted computes the same bits again when it comes back.
TEST(DnnlLinearTest, PrimitiveCacheStaysWithinItsCapacityAndEvictedShapesStillCompute) {
  DnnlLinear::SetPrimitiveCacheCapacity(8);
  const int64_t n = 24, k = 40;
  const std::vector<float> w1 = Random(n * k, 1, 0.1f), w2 = Random(n * k, 2, 0.1f);
  const std::vector<float> x = Random(64 * k, 3);
  absl::StatusOr<std::unique_ptr<DnnlLinear>> a = DnnlLinear::Create(w1.data(), n, k, nullptr);
  absl::StatusOr<std::unique_ptr<DnnlLinear>> b = DnnlLinear::Create(w2.data(), n, k, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> first(5 * n), again(5 * n), other(5 * n);
  ASSERT_TRUE((*a)->Forward(x.data(), 5, first.data()).ok());
  for (int64_t m = 6; m < 40; ++m) {  // 34 new shapes through a cache of 8
    std::vector<float> y(m * n);
    ASSERT_TRUE((*a)->Forward(x.data(), m, y.data()).ok());
    ASSERT_LE(DnnlLinear::CachedPrimitives(), 8);
  }
  EXPECT_EQ(DnnlLinear::CachedPrimitives(), 8);
  ASSERT_TRUE((*a)->Forward(x.data(), 5, again.data()).ok());  // m = 5 was evicted
  EXPECT_EQ(first, again);
  const int64_t before = DnnlLinear::CachedPrimitives();
  ASSERT_TRUE((*b)->Forward(x.data(), 5, other.data()).ok());  // same shape: same entry
  EXPECT_EQ(DnnlLinear::CachedPrimitives(), before);
  EXPECT_NE(first, other);  // ...with b's own weights
  DnnlLinear::SetPrimitiveCacheCapacity(DnnlLinear::kPrimitiveCacheCapacity);
}

}  // namespace
}  // namespace tandem
