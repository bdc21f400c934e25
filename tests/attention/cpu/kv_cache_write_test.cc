// WriteKvCache: every path converts exactly as kv_dtype.h's reference conversions, writes only
// the addressed (slot, head, layer, K|V) rows, and skips slot −1.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attention/cpu/cpu_isa.h"
#include "attention/cpu/paged_attention.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr uint8_t kFill = 0xab;

// Random bit patterns cover every exponent (subnormals, overflow to inf, ties); NaNs are
// replaced by a quiet NaN because f16 hardware keeps payload bits the reference drops.
std::vector<float> RandomFloats(int64_t n, std::mt19937_64& rng) {
  std::vector<float> v(n);
  for (float& x : v) {
    uint32_t bits = static_cast<uint32_t>(rng());
    std::memcpy(&x, &bits, sizeof(x));
    if (std::isnan(x)) x = std::nanf("");
  }
  // Exact round-to-even ties for both 16-bit formats.
  if (n >= 4) {
    v[0] = 1.f + std::ldexp(1.f, -8);      // bf16 tie, rounds down to 1
    v[1] = 1.f + 3 * std::ldexp(1.f, -8);  // bf16 tie, rounds up
    v[2] = 1.f + std::ldexp(1.f, -11);     // f16 tie
    v[3] = 65520.f;                        // f16 overflows to inf
  }
  return v;
}

// Whether dst holds src converted by the reference (kv_dtype.h) conversion, bit for bit; a NaN
// only has to stay NaN.
bool SameValue(KvDType t, float src, const uint8_t* dst) {
  if (t == KvDType::kF32) {
    float got;
    std::memcpy(&got, dst, sizeof(got));
    return std::isnan(src) ? std::isnan(got) : std::memcmp(&src, &got, sizeof(got)) == 0;
  }
  uint16_t got;
  std::memcpy(&got, dst, sizeof(got));
  if (std::isnan(src)) return std::isnan(t == KvDType::kF16 ? HalfToFloat(got) : Bf16ToFloat(got));
  return got == (t == KvDType::kF16 ? FloatToHalf(src) : FloatToBf16(src));
}

class KvCacheWriteTest
    : public ::testing::TestWithParam<std::tuple<CpuIsa, KvDType, int32_t /*head_dim*/>> {
 protected:
  void SetUp() override {
    if (!CpuSupports(std::get<0>(GetParam()))) {
      GTEST_SKIP() << "this CPU lacks the " << CpuIsaName(std::get<0>(GetParam())) << " path";
    }
    ASSERT_TRUE(PinCpuIsa(std::get<0>(GetParam())).ok());
  }
  void TearDown() override { UnpinCpuIsa(); }
};

TEST_P(KvCacheWriteTest, ConvertsExactlyAndWritesOnlyTheAddressedRows) {
  const auto [isa, dtype, head_dim] = GetParam();
  PoolGeometry g;
  g.num_kv_heads = 3;
  g.num_layers = 2;
  g.block_size = 4;
  g.head_dim = head_dim;
  g.dtype = dtype;
  const int64_t num_blocks = 5;
  std::vector<uint8_t> bytes(PoolBytes(g, num_blocks), kFill);
  const KvPoolView pool{bytes.data(), num_blocks, g};

  std::mt19937_64 rng(static_cast<uint64_t>(head_dim) * 31 + static_cast<uint64_t>(dtype));
  const std::vector<int64_t> slots = {7, -1, 0, 19, 12, -1, 13};
  const int64_t rows = static_cast<int64_t>(slots.size());
  const int64_t row_floats = int64_t{g.num_kv_heads} * head_dim;
  const std::vector<float> k = RandomFloats(rows * row_floats, rng);
  const std::vector<float> v = RandomFloats(rows * row_floats, rng);
  ASSERT_TRUE(ValidateKvCacheWrite(pool, 1, slots.data(), rows).ok());
  WriteKvCache(pool, 1, slots.data(), rows, k.data(), v.data());

  std::vector<bool> written(bytes.size(), false);
  for (int64_t i = 0; i < rows; ++i) {
    if (slots[i] < 0) continue;
    for (int32_t h = 0; h < g.num_kv_heads; ++h) {
      for (int32_t kv = 0; kv < 2; ++kv) {
        const float* src = (kv == 0 ? k.data() : v.data()) + i * row_floats + h * head_dim;
        const int64_t at = KvSlotElementIndex(g, slots[i], h, 1, kv) * g.elem_bytes();
        for (int32_t x = 0; x < head_dim; ++x) {
          const int64_t byte = at + x * g.elem_bytes();
          ASSERT_TRUE(SameValue(dtype, src[x], bytes.data() + byte))
              << "row " << i << " head " << h << (kv ? " V" : " K") << " element " << x << " value "
              << src[x];
          for (int64_t b = 0; b < g.elem_bytes(); ++b) written[byte + b] = true;
        }
      }
    }
  }
  for (size_t b = 0; b < bytes.size(); ++b) {
    if (!written[b]) {
      ASSERT_EQ(bytes[b], kFill) << "byte " << b << " was written";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllPaths, KvCacheWriteTest,
    ::testing::Combine(::testing::Values(CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512),
                       ::testing::Values(KvDType::kF32, KvDType::kF16, KvDType::kBF16),
                       ::testing::Values(3, 8, 16, 128)),
    [](const auto& info) {
      return std::string(CpuIsaName(std::get<0>(info.param))) + "_" +
             std::string(KvDTypeName(std::get<1>(info.param))) + "_d" +
             std::to_string(std::get<2>(info.param));
    });

}  // namespace
}  // namespace tandem
