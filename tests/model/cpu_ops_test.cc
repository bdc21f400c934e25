#include "model/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::cpu {
namespace {

TEST(CpuOpsTest, SiluMulMatchesTheScalarFormulaOverTheWholeRangeOnEveryPath) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-30.f, 30.f);
  const int64_t n = 4099;  // not a multiple of 16: exercises the tail
  std::vector<float> gate(n), up(n), out(n);
  for (int64_t i = 0; i < n; ++i) gate[i] = dist(rng), up[i] = dist(rng);
  gate[0] = -100.f, gate[1] = 100.f, gate[2] = 0.f, gate[3] = -88.5f, gate[4] = 88.5f;
  auto check = [&](const std::vector<float>& got) {
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      const double want = g / (1.0 + std::exp(-g)) * up[i];
      ASSERT_NEAR(got[i], want, 2e-6 * (std::abs(want) + 1e-30) + 1e-30) << "gate " << g;
    }
  };
  SiluMul(gate.data(), up.data(), n, out.data());  // the active path, in parallel
  check(out);
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    SCOPED_TRACE(CpuIsaName(isa));
    std::vector<float> whole(n), pieces(n);
    SiluMulOnPath(isa, gate.data(), up.data(), 0, n, whole.data());
    check(whole);
    // Ranges that start and end off the vector width give every element the same bits.
    for (int64_t begin = 0, len = 1; begin < n; begin += len, len = len % 37 + 3) {
      SiluMulOnPath(isa, gate.data(), up.data(), begin, std::min(n, begin + len), pieces.data());
    }
    ASSERT_EQ(pieces, whole);
    std::vector<float> in_place = gate;  // out aliasing gate
    SiluMulOnPath(isa, in_place.data(), up.data(), 0, n, in_place.data());
    ASSERT_EQ(in_place, whole);
  }
}

TEST(CpuOpsTest, RopeTableMatchesDirectRotation) {
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    const int32_t heads = 3, d = 8;
    const std::vector<int64_t> pos = {0, 5, 1000, 77};
    std::vector<float> x(pos.size() * heads * d);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i);
    const std::vector<float> orig = x;
    RopeTable table;
    table.Ensure(10, d, 10000.f);
    table.Ensure(1000, d, 10000.f);  // grows
    Rope(x.data(), static_cast<int64_t>(pos.size()), heads, d, pos.data(), style, table);
    for (size_t r = 0; r < pos.size(); ++r) {
      for (int32_t h = 0; h < heads; ++h) {
        for (int32_t i = 0; i < d / 2; ++i) {
          const double angle = pos[r] * std::pow(10000.0, -2.0 * i / d);
          const int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
          const int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + d / 2;
          const size_t base = (r * heads + h) * d;
          EXPECT_NEAR(x[base + a],
                      orig[base + a] * std::cos(angle) - orig[base + b] * std::sin(angle), 1e-5);
          EXPECT_NEAR(x[base + b],
                      orig[base + a] * std::sin(angle) + orig[base + b] * std::cos(angle), 1e-5);
        }
      }
    }
  }
}

TEST(CpuOpsTest, RmsNormMatchesDoubleReference) {
  const int64_t m = 3, n = 37;
  std::vector<float> x(m * n), w(n), y(m * n);
  for (int64_t i = 0; i < m * n; ++i) x[i] = std::cos(0.1f * i) * (i % 7);
  for (int64_t j = 0; j < n; ++j) w[j] = 1.f + 0.01f * j;
  RmsNorm(x.data(), w.data(), m, n, 1e-5f, y.data());
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(x[i * n + j]) * x[i * n + j];
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(y[i * n + j], x[i * n + j] * scale * w[j], 1e-5);
  }
}

}  // namespace
}  // namespace tandem::cpu
