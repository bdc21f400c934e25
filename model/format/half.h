// IEEE binary16 (F16) and bfloat16 (BF16) <-> f32 conversions, bit-exact and portable.
//
// F32 -> F16 / BF16 round to nearest, ties to even; values past the F16 range become infinity;
// NaN stays NaN (quiet). Pure functions; thread-safe.
#pragma once

#include <bit>
#include <cstdint>

namespace tandem {

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa · 2^-24, exact in f32.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t F32ToF16(float f);

inline float Bf16ToF32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t F32ToBf16(float f);

}  // namespace tandem
