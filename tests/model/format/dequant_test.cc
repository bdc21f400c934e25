// Dequantisation against blocks built by hand from the GGML block definitions (dequant.h).
// The K-quant layouts were additionally cross-checked during development against the `gguf`
// Python package's dequantize() on random blocks; these tests pin the same layouts without
// Python.
#include "model/format/dequant.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/half.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

void PutHalf(std::string& block, size_t at, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(block.data() + at, &h, 2);
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::vector<float> DequantBlock(GgmlType type, const std::string& block, size_t n) {
  std::vector<float> out(n, -999.f);
  EXPECT_TRUE(Dequantize(type, Bytes(block), absl::MakeSpan(out)).ok());
  return out;
}

TEST(DequantTest, F32F16Bf16) {
  const float f32[] = {1.5f, -2.25f};
  std::string b(reinterpret_cast<const char*>(f32), sizeof f32);
  EXPECT_EQ(DequantBlock(GgmlType::kF32, b, 2), (std::vector<float>{1.5f, -2.25f}));
  const uint16_t f16[] = {0x3C00, 0xC100};  // 1, -2.5
  b.assign(reinterpret_cast<const char*>(f16), sizeof f16);
  EXPECT_EQ(DequantBlock(GgmlType::kF16, b, 2), (std::vector<float>{1.f, -2.5f}));
  const uint16_t bf16[] = {0x4040, 0xBF00};  // 3, -0.5
  b.assign(reinterpret_cast<const char*>(bf16), sizeof bf16);
  EXPECT_EQ(DequantBlock(GgmlType::kBF16, b, 2), (std::vector<float>{3.f, -0.5f}));
}

TEST(DequantTest, Q8_0) {
  std::string block(34, '\0');
  PutHalf(block, 0, 0.5f);
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<char>(static_cast<int8_t>(j * 8 - 127));
  const std::vector<float> x = DequantBlock(GgmlType::kQ8_0, block, 32);
  EXPECT_EQ(x[0], -63.5f);  // 0.5 · −127
  EXPECT_EQ(x[16], 0.5f);   // 0.5 · 1
  for (int j = 0; j < 32; ++j) EXPECT_EQ(x[j], 0.5f * (j * 8 - 127)) << j;
}

TEST(DequantTest, Q4_0LowNibblesFirstHalfHighNibblesSecondHalf) {
  std::string block(18, '\0');
  PutHalf(block, 0, 2.0f);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<char>(j | ((15 - j) << 4));
  const std::vector<float> x = DequantBlock(GgmlType::kQ4_0, block, 32);
  EXPECT_EQ(x[0], -16.f);   // 2 · (0 − 8)
  EXPECT_EQ(x[15], 14.f);   // 2 · (15 − 8)
  EXPECT_EQ(x[16], 14.f);   // high nibble of byte 0 = 15
  EXPECT_EQ(x[31], -16.f);  // high nibble of byte 15 = 0
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[j], 2.f * (j - 8));
    EXPECT_EQ(x[j + 16], 2.f * (15 - j - 8));
  }
}

TEST(DequantTest, Q4_1AddsTheMin) {
  std::string block(20, '\0');
  PutHalf(block, 0, 0.25f);
  PutHalf(block, 2, -1.0f);
  for (int j = 0; j < 16; ++j) block[4 + j] = static_cast<char>(j | ((15 - j) << 4));
  const std::vector<float> x = DequantBlock(GgmlType::kQ4_1, block, 32);
  EXPECT_EQ(x[0], -1.f);    // 0.25 · 0 − 1
  EXPECT_EQ(x[16], 2.75f);  // 0.25 · 15 − 1
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[j], 0.25f * j - 1.f);
    EXPECT_EQ(x[j + 16], 0.25f * (15 - j) - 1.f);
  }
}

// Q4_K: 8 sub-blocks of 32 with 6-bit (scale, min); sub-blocks 4..7 use values above 15 so the
// split low-nibble / high-2-bit packing is exercised.
TEST(DequantTest, Q4_K) {
  const int sc[8] = {1, 2, 3, 4, 20, 33, 47, 63};
  const int mn[8] = {0, 2, 4, 6, 17, 31, 50, 62};
  std::string block(144, '\0');
  PutHalf(block, 0, 1.0f);  // d
  PutHalf(block, 2, 0.5f);  // dmin
  uint8_t* s = reinterpret_cast<uint8_t*>(block.data() + 4);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
  uint8_t* qs = reinterpret_cast<uint8_t*>(block.data() + 16);
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l)
      qs[32 * p + l] = static_cast<uint8_t>((l % 16) | (((l + p) % 16) << 4));
  }
  const std::vector<float> x = DequantBlock(GgmlType::kQ4_K, block, 256);
  EXPECT_EQ(x[0], 0.f);          // 1·1·0 − 0.5·0
  EXPECT_EQ(x[33], 1.f);         // sub-block 1, l=1: 1·2·1 − 0.5·2
  EXPECT_EQ(x[128 + 5], 91.5f);  // sub-block 4, l=5: 1·20·5 − 0.5·17
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(x[64 * p + l], 1.f * sc[2 * p] * (l % 16) - 0.5f * mn[2 * p]) << p << " " << l;
      EXPECT_EQ(x[64 * p + 32 + l], 1.f * sc[2 * p + 1] * ((l + p) % 16) - 0.5f * mn[2 * p + 1])
          << p << " " << l;
    }
  }
}

// Q6_K: element e = 128h + 32k + l takes 4 low bits from ql (k=0: low nibble of ql[64h+l],
// k=1: low of ql[64h+l+32], k=2: high of ql[64h+l], k=3: high of ql[64h+l+32]), 2 high bits
// from bits 2k..2k+1 of qh[32h+l], and scale 8h + l/16 + 2k.
TEST(DequantTest, Q6_K) {
  std::string block(210, '\0');
  uint8_t* ql = reinterpret_cast<uint8_t*>(block.data());
  uint8_t* qh = ql + 128;
  int8_t* scales = reinterpret_cast<int8_t*>(ql + 192);
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>(i - 8);
  PutHalf(block, 208, 0.5f);
  auto q6 = [](int e) { return (e * 7) % 64; };
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int q = q6(128 * h + 32 * k + l);
        uint8_t& low = ql[64 * h + l + (k % 2) * 32];
        low |= static_cast<uint8_t>(k < 2 ? (q & 0xF) : (q & 0xF) << 4);
        qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
      }
    }
  }
  const std::vector<float> x = DequantBlock(GgmlType::kQ6_K, block, 256);
  EXPECT_EQ(x[0], 128.f);  // q6(0)=0 → 0.5 · scale[0]=−8 · (0 − 32)
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * h + 32 * k + l;
        EXPECT_EQ(x[e], 0.5f * scales[8 * h + l / 16 + 2 * k] * (q6(e) - 32)) << e;
      }
    }
  }
}

// The 5-bit value of element e in the Q5 tests: every value 0..31 occurs, the fifth bit in both
// halves of a block.
int Q5Value(int e) { return (e * 11 + 3) % 32; }

// Q5_0 / Q5_1: element j < 16 takes the low nibble of qs[j], j + 16 the high one; the fifth bit
// of element e is bit e of the little-endian u32 qh.
std::string Q5Block(bool with_min) {
  const size_t at = with_min ? 4 : 2;
  std::string block(with_min ? 24 : 22, '\0');
  PutHalf(block, 0, 0.25f);
  if (with_min) PutHalf(block, 2, -1.5f);
  uint32_t qh = 0;
  uint8_t* qs = reinterpret_cast<uint8_t*>(block.data() + at + 4);
  for (int e = 0; e < 32; ++e) {
    const int q = Q5Value(e);
    qh |= static_cast<uint32_t>(q >> 4) << e;
    qs[e % 16] |= static_cast<uint8_t>((q & 0xF) << (e < 16 ? 0 : 4));
  }
  std::memcpy(block.data() + at, &qh, 4);
  return block;
}

TEST(DequantTest, Q5_0AndQ5_1) {
  const std::vector<float> x0 = DequantBlock(GgmlType::kQ5_0, Q5Block(false), 32);
  const std::vector<float> x1 = DequantBlock(GgmlType::kQ5_1, Q5Block(true), 32);
  EXPECT_EQ(x0[0], 0.25f * (3 - 16));
  EXPECT_EQ(x1[2], 0.25f * 25 - 1.5f);
  for (int e = 0; e < 32; ++e) {
    EXPECT_EQ(x0[e], 0.25f * static_cast<float>(Q5Value(e) - 16)) << e;
    EXPECT_EQ(x1[e], 0.25f * static_cast<float>(Q5Value(e)) + -1.5f) << e;
  }
}

// Q5_K: Q4_K's scales, mins and nibble order (sub-block 2i in the low nibbles of qs[32i..],
// 2i+1 in the high ones), and the fifth bit of element l of sub-block j in bit j of qh[l].
TEST(DequantTest, Q5_K) {
  const int sc[8] = {1, 2, 3, 4, 20, 33, 47, 63};
  const int mn[8] = {0, 2, 4, 6, 17, 31, 50, 62};
  std::string block(176, '\0');
  PutHalf(block, 0, 0.5f);   // d
  PutHalf(block, 2, 0.25f);  // dmin
  uint8_t* s = reinterpret_cast<uint8_t*>(block.data() + 4);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
  uint8_t* qh = reinterpret_cast<uint8_t*>(block.data() + 16);
  uint8_t* qs = reinterpret_cast<uint8_t*>(block.data() + 48);
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      const int q = Q5Value(32 * j + l);
      qs[32 * (j / 2) + l] |= static_cast<uint8_t>((q & 0xF) << (j % 2 ? 4 : 0));
      qh[l] |= static_cast<uint8_t>((q >> 4) << j);
    }
  }
  const std::vector<float> x = DequantBlock(GgmlType::kQ5_K, block, 256);
  EXPECT_EQ(x[0], 1.5f);           // 0.5·1·3 − 0.25·0
  EXPECT_EQ(x[128 + 1], 135.75f);  // sub-block 4, l=1: 0.5·20·14 − 0.25·17
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      const float d1 = 0.5f * static_cast<float>(sc[j]), m1 = 0.25f * static_cast<float>(mn[j]);
      EXPECT_EQ(x[32 * j + l], d1 * static_cast<float>(Q5Value(32 * j + l)) - m1) << j << " " << l;
    }
  }
}

TEST(DequantTest, RejectsWrongSizesAndUnsupportedTypes) {
  std::vector<float> out(32);
  const std::string short_block(33, '\0');
  EXPECT_STATUS_IS(Dequantize(GgmlType::kQ8_0, Bytes(short_block), absl::MakeSpan(out)),
                   absl::StatusCode::kInvalidArgument, "needs 34 bytes, got 33");
  std::vector<float> odd(31);
  EXPECT_STATUS_IS(Dequantize(GgmlType::kQ8_0, Bytes(short_block), absl::MakeSpan(odd)),
                   absl::StatusCode::kInvalidArgument, "not a whole number of 32-element blocks");
  const std::string iq4(18, '\0');
  EXPECT_STATUS_IS(Dequantize(GgmlType::kIQ4_NL, Bytes(iq4), absl::MakeSpan(out)),
                   absl::StatusCode::kUnimplemented, "cannot dequantise tensor type IQ4_NL");
}

TEST(DequantTest, Q8_0QuantiseRoundTripsWithinHalfAStep) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 3.f;
  const absl::StatusOr<std::string> q = Quantize(GgmlType::kQ8_0, x);
  ASSERT_OK(q);
  ASSERT_EQ(q->size(), 68u);
  std::vector<float> y(64);
  ASSERT_OK(Dequantize(GgmlType::kQ8_0, Bytes(*q), absl::MakeSpan(y)));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 3.f / 127.f * 0.51f) << i;
  const std::vector<float> super_block(256, 1.f);
  EXPECT_STATUS_IS(Quantize(GgmlType::kQ4_K, super_block), absl::StatusCode::kUnimplemented,
                   "cannot quantise to tensor type Q4_K");
}

}  // namespace
}  // namespace tandem
