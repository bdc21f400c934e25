// The 5-bit GGML types for the GEMV kernels of quant_gemv_impl.h: Q5_0, Q5_1 (32-element blocks)
// and Q5_K (256-element super-blocks). Included only at the end of quant_gemv_impl.h, whose
// Select / SelectDequant hand these types to SelectQ5 / SelectQ5Dequant; so, like the rest of
// that header, everything here is compiled once per ISA file in an anonymous namespace.
//
// Each decoder builds the 32 weights of chunk c as model/format/dequant.cc does: the 5-bit
// value q (nibble | fifth bit << 4) is exact in a byte, converted to f32 exactly, then d·(q − 16)
// (Q5_0), d·q + m (Q5_1) or (d·sc)·q − dmin·mn (Q5_K, Q4_K's scales) — one mul, then one add
// or sub, never fused — so the weights are bit-identical to the dequantised model's. The files
// keep their own layout (no packing); the fifth bits are spread to bytes with a byte shuffle.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tandem::quant::impl {
namespace {

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Byte i = 0x10 when bit (first + i) of qh is set, else 0, for i = 0..15 (first 0 or 16): the
// fifth bits of elements first .. first + 15 of a Q5_0/Q5_1 block, in place.
inline __m128i FifthBits(uint32_t qh, int first) {
  const __m128i v = _mm_cvtsi32_si128(static_cast<int>(qh >> first));
  // Bytes 0..7 copy qh's byte 0, bytes 8..15 its byte 1; then each keeps its own bit.
  const __m128i bytes =
      _mm_shuffle_epi8(v, _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  const __m128i bit = _mm_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(bytes, bit), bit), _mm_set1_epi8(0x10));
}

template <class I>
struct Q5_0 {
  static constexpr int64_t kBlock = 32, kBytes = 22;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    const uint8_t* b = row + c * kBytes;
    const typename I::V d = I::Set1(I::F16ToF32(LoadU16(b)));
    const uint32_t qh = LoadU32(b + 2);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6));
    const __m128i sixteen = _mm_set1_epi8(16);
    I::I8x16(_mm_sub_epi8(_mm_or_si128(LowNibbles(q), FifthBits(qh, 0)), sixteen), w);
    I::I8x16(_mm_sub_epi8(_mm_or_si128(HighNibbles(q), FifthBits(qh, 16)), sixteen),
             w + 16 / I::kLanes);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Mul(d, w[p]);
  }
};

template <class I>
struct Q5_1 {
  static constexpr int64_t kBlock = 32, kBytes = 24;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    const uint8_t* b = row + c * kBytes;
    const typename I::V d = I::Set1(I::F16ToF32(LoadU16(b)));
    const typename I::V m = I::Set1(I::F16ToF32(LoadU16(b + 2)));
    const uint32_t qh = LoadU32(b + 4);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8));
    I::U8x16(_mm_or_si128(LowNibbles(q), FifthBits(qh, 0)), w);
    I::U8x16(_mm_or_si128(HighNibbles(q), FifthBits(qh, 16)), w + 16 / I::kLanes);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Add(I::Mul(d, w[p]), m);
  }
};

// Q5_K: chunk c is sub-block j = c % 8 of super-block c / 8 — Q4_K's scales and nibbles (low
// nibbles of qs[32·(j/2) + l] for even j, high for odd), and bit j of qh[l] as the fifth bit.
template <class I>
struct Q5_K {
  static constexpr int64_t kBlock = 256, kBytes = 176;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int j = static_cast<int>(c & 7);
    const float d = I::F16ToF32(LoadU16(b));
    const float dmin = I::F16ToF32(LoadU16(b + 2));
    int sc, mn;
    Q4KScaleMin(j, b + 4, &sc, &mn);
    const typename I::V d1 = I::Set1(d * static_cast<float>(sc));
    const typename I::V m1 = I::Set1(dmin * static_cast<float>(mn));
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48 + 32 * (j >> 1);
    const __m128i nibble_shift = _mm_cvtsi32_si128((j & 1) * 4);
    const __m128i bit_shift = _mm_cvtsi32_si128(j);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * h));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16 * h));
      // 16-bit shifts move bits across byte boundaries; the masks keep each byte's own bits.
      const __m128i nib = _mm_and_si128(_mm_srl_epi16(l, nibble_shift), _mm_set1_epi8(0x0f));
      const __m128i fifth = _mm_and_si128(_mm_srl_epi16(hi, bit_shift), _mm_set1_epi8(0x01));
      I::U8x16(_mm_or_si128(nib, _mm_slli_epi16(fifth, 4)), w + h * (16 / I::kLanes));
    }
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Sub(I::Mul(d1, w[p]), m1);
  }
};

template <class I>
internal::GemvFn SelectQ5(GgmlType type) {
  switch (type) {
    case GgmlType::kQ5_0:
      return &Gemv<I, Q5_0<I>>;
    case GgmlType::kQ5_1:
      return &Gemv<I, Q5_1<I>>;
    case GgmlType::kQ5_K:
      return &Gemv<I, Q5_K<I>>;
    default:
      return nullptr;
  }
}

template <class I>
internal::DequantFn SelectQ5Dequant(GgmlType type) {
  switch (type) {
    case GgmlType::kQ5_0:
      return &DequantRows<I, Q5_0<I>>;
    case GgmlType::kQ5_1:
      return &DequantRows<I, Q5_1<I>>;
    case GgmlType::kQ5_K:
      return &DequantRows<I, Q5_K<I>>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace tandem::quant::impl
