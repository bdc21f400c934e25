#include "model/format/dequant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/format/half.h"

namespace tandem {
namespace {

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float LoadF16(const uint8_t* p) { return F16ToF32(LoadU16(p)); }

void DequantF32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadF16(src + 2 * i);
}

void DequantBf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(LoadU16(src + 2 * i));
}

void DequantQ8_0(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 34, dst += 32) {
    const float d = LoadF16(src);
    const int8_t* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = d * static_cast<float>(q[j]);
  }
}

void DequantQ4_0(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 18, dst += 32) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>((qs[j] & 0x0f) - 8);
      dst[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

void DequantQ4_1(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 20, dst += 32) {
    const float d = LoadF16(src);
    const float m = LoadF16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
      dst[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

// The 6-bit scale and min of Q4_K sub-block j (0..7) from the 12 packed bytes: sub-blocks 0..3
// keep theirs in the low 6 bits of bytes j (scale) and j+4 (min); sub-blocks 4..7 take 4 low
// bits from byte j+4 (scale: low nibble, min: high nibble) and the 2 high bits from the top bits
// of bytes j-4 (scale) and j (min).
void Q4KScaleMin(int j, const uint8_t* s, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void DequantQ4_K(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 144, dst += 256) {
    const float d = LoadF16(src);
    const float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    for (int pair = 0; pair < 4; ++pair) {
      int sc_lo, mn_lo, sc_hi, mn_hi;
      Q4KScaleMin(2 * pair, scales, &sc_lo, &mn_lo);
      Q4KScaleMin(2 * pair + 1, scales, &sc_hi, &mn_hi);
      const float d_lo = d * static_cast<float>(sc_lo), m_lo = dmin * static_cast<float>(mn_lo);
      const float d_hi = d * static_cast<float>(sc_hi), m_hi = dmin * static_cast<float>(mn_hi);
      const uint8_t* q = qs + 32 * pair;
      float* out = dst + 64 * pair;
      for (int l = 0; l < 32; ++l) {
        out[l] = d_lo * static_cast<float>(q[l] & 0x0f) - m_lo;
        out[l + 32] = d_hi * static_cast<float>(q[l] >> 4) - m_hi;
      }
    }
  }
}

// Q5_0 / Q5_1: the 5th bit of element j (0..31) is bit j of the little-endian u32 qh; element j
// (j < 16) takes the low nibble of qs[j], element j + 16 the high nibble.
uint32_t LoadQh(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void DequantQ5_0(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 22, dst += 32) {
    const float d = LoadF16(src);
    const uint32_t qh = LoadQh(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      const int x0 = static_cast<int>((qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - 16;
      const int x1 = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      dst[j] = d * static_cast<float>(x0);
      dst[j + 16] = d * static_cast<float>(x1);
    }
  }
}

void DequantQ5_1(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 24, dst += 32) {
    const float d = LoadF16(src);
    const float m = LoadF16(src + 2);
    const uint32_t qh = LoadQh(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) {
      const uint32_t x0 = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
      const uint32_t x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      dst[j] = d * static_cast<float>(x0) + m;
      dst[j + 16] = d * static_cast<float>(x1) + m;
    }
  }
}

// Q5_K: Q4_K's scales and nibbles, plus a 5th bit: element l of sub-block j (0..7) takes bit j
// of qh[l] (l = 0..31).
void DequantQ5_K(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 176, dst += 256) {
    const float d = LoadF16(src);
    const float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      Q4KScaleMin(j, scales, &sc, &mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      const uint8_t* q = qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int x = ((q[l] >> shift) & 0x0f) | (((qh[l] >> j) & 1) << 4);
        dst[32 * j + l] = d1 * static_cast<float>(x) - m1;
      }
    }
  }
}

void DequantQ6_K(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 210, dst += 256) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = LoadF16(src + 208);
    // Two halves of 128 elements. In a half, element l + 32·k (l < 32, k = 0..3) takes its 4 low
    // bits from the low nibble of ql[l] (k=0) or ql[l+32] (k=1), the high nibble of ql[l] (k=2)
    // or ql[l+32] (k=3), its 2 high bits from bits 2k..2k+1 of qh[l], and scale l/16 + 2k.
    for (int half = 0; half < 2; ++half) {
      const uint8_t* L = ql + 64 * half;
      const uint8_t* H = qh + 32 * half;
      const int8_t* S = sc + 8 * half;
      float* out = dst + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q0 = ((L[l] & 0x0f) | (((H[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((L[l + 32] & 0x0f) | (((H[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * static_cast<float>(S[is] * q0);
        out[l + 32] = d * static_cast<float>(S[is + 2] * q1);
        out[l + 64] = d * static_cast<float>(S[is + 4] * q2);
        out[l + 96] = d * static_cast<float>(S[is + 6] * q3);
      }
    }
  }
}

}  // namespace

absl::Status ValidateDequantize(GgmlType type, int64_t numel, size_t src_bytes) {
  const GgmlTypeInfo& info = GgmlTypeTraits(type);
  if (!info.dequantizable) {
    return absl::UnimplementedError(absl::StrCat(
        "cannot dequantise tensor type ", info.name,
        " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)"));
  }
  const absl::StatusOr<int64_t> bytes = GgmlByteSize(type, numel);
  if (!bytes.ok()) return bytes.status();
  if (*bytes != static_cast<int64_t>(src_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("dequantising ", numel, " elements of ",
                                                   info.name, " needs ", *bytes, " bytes, got ",
                                                   src_bytes));
  }
  return absl::OkStatus();
}

absl::Status Dequantize(GgmlType type, absl::Span<const uint8_t> src, absl::Span<float> dst) {
  const int64_t n = static_cast<int64_t>(dst.size());
  const absl::Status valid = ValidateDequantize(type, n, src.size());
  if (!valid.ok()) return valid;
  const GgmlTypeInfo& info = GgmlTypeTraits(type);
  const int64_t blocks = n / info.block_size;
  switch (type) {
    case GgmlType::kF32:
      DequantF32(src.data(), dst.data(), n);
      break;
    case GgmlType::kF16:
      DequantF16(src.data(), dst.data(), n);
      break;
    case GgmlType::kBF16:
      DequantBf16(src.data(), dst.data(), n);
      break;
    case GgmlType::kQ8_0:
      DequantQ8_0(src.data(), dst.data(), blocks);
      break;
    case GgmlType::kQ4_0:
      DequantQ4_0(src.data(), dst.data(), blocks);
      break;
    case GgmlType::kQ4_1:
      DequantQ4_1(src.data(), dst.data(), blocks);
      break;
    case GgmlType::kQ5_0:
      DequantQ5_0(src.data(), dst.data(), blocks);
      break;
    case GgmlType::kQ5_1:
      DequantQ5_1(src.data(), dst.data(), blocks);
      break;
    case GgmlType::kQ4_K:
      DequantQ4_K(src.data(), dst.data(), blocks);
      break;
    case GgmlType::kQ5_K:
      DequantQ5_K(src.data(), dst.data(), blocks);
      break;
    case GgmlType::kQ6_K:
      DequantQ6_K(src.data(), dst.data(), blocks);
      break;
    default:
      return absl::InternalError(absl::StrCat("no kernel for dequantisable type ", info.name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Quantize(GgmlType type, absl::Span<const float> src) {
  const GgmlTypeInfo& info = GgmlTypeTraits(type);
  const absl::StatusOr<int64_t> bytes = GgmlByteSize(type, static_cast<int64_t>(src.size()));
  if (!bytes.ok()) return bytes.status();
  std::string out(static_cast<size_t>(*bytes), '\0');
  uint8_t* p = reinterpret_cast<uint8_t*>(out.data());
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(p, src.data(), out.size());
      break;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (size_t i = 0; i < src.size(); ++i) {
        const uint16_t h = type == GgmlType::kF16 ? F32ToF16(src[i]) : F32ToBf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      break;
    case GgmlType::kQ8_0:
      for (size_t b = 0; b < src.size() / 32; ++b, p += 34) {
        const float* x = src.data() + 32 * b;
        float amax = 0.f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        // Store the scale as F16 first and quantise against the stored value, so the decoder's
        // d·q reproduces the encoder's intent as closely as the F16 scale allows.
        const uint16_t d16 = F32ToF16(amax / 127.f);
        const float d = F16ToF32(d16);
        const float inv = d > 0.f ? 1.f / d : 0.f;
        std::memcpy(p, &d16, 2);
        for (int j = 0; j < 32; ++j) {
          const float q = std::clamp(std::nearbyint(x[j] * inv), -127.f, 127.f);
          p[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
        }
      }
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("cannot quantise to tensor type ", info.name,
                                                   " (supported: F32, F16, BF16, Q8_0)"));
  }
  return out;
}

}  // namespace tandem
