// KV cache element types and their scalar conversions (host/device-callable).
// Kernels use vector conversions where the ISA has them; these are the reference semantics:
// f16 is IEEE binary16 (round to nearest even), bf16 is the top half of an f32 (round to
// nearest even, NaN kept NaN).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "attention/hd.h"

namespace tandem {

enum class KvDType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

TANDEM_HD constexpr int32_t KvDTypeBytes(KvDType t) { return t == KvDType::kF32 ? 4 : 2; }

constexpr std::string_view KvDTypeName(KvDType t) {
  switch (t) {
    case KvDType::kF32:
      return "f32";
    case KvDType::kF16:
      return "f16";
    case KvDType::kBF16:
      return "bf16";
  }
  return "?";
}

TANDEM_HD inline uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
TANDEM_HD inline float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

TANDEM_HD inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
TANDEM_HD inline float Bf16ToFloat(uint16_t h) {
  return BitsToFloat(static_cast<uint32_t>(h) << 16);
}

TANDEM_HD inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return BitsToFloat(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant << 13));
  }
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

TANDEM_HD inline uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // in [14, 24]
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(sign | r);
}

}  // namespace tandem
