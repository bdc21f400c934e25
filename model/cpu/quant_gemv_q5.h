// The 5-bit GGML types for the GEMV kernels of quant_gemv_impl.h: Q5_0, Q5_1 (32-element blocks)
// and Q5_K (256-element super-blocks). Included only at the end of quant_gemv_impl.h, whose
// Select / SelectDequant hand these types to SelectQ5 / SelectQ5Dequant; so, like the rest of
// that header, everything here is compiled once per ISA file in an anonymous namespace.
//
// Each decoder builds the 32 weights of chunk c as model/format/dequant.cc does: the 5-bit
// value q (nibble | fifth bit << 4) is exact in a byte, converted to f32 exactly, then d·(q − 16)
// (Q5_0), d·q + m (Q5_1) or (d·sc)·q − dmin·mn (Q5_K, Q4_K's scales) — one mul, then one add
// or sub, never fused — so the weights are bit-identical to the dequantised model's. Q5_K keeps
// the file's layout (its fifth bits spread to bytes with a byte shuffle), as do Q5_0 / Q5_1 rows
// that were not packed; QuantLinear packs Q5_0 / Q5_1 into 5-bit lane fields (quant_pack_q5.h).
// Where a path has a factored GEMV for a type (quant_gemv_avx2.cc, quant_gemv_avx512.cc pick
// it first), these decoders still produce its dequantised tiles (DequantRows).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/cpu/quant_pack_q5.h"

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

// Packed Q5_0 / Q5_1 rows (quant_pack_q5.h): chunk c is block c % 3 of group c / 3, whose
// elements are fields 2·(c % 3) (0..15) and 2·(c % 3) + 1 (16..31) of the group's 16 lanes.
// With kLut the block's 32 possible weights sit in two 16-entry tables (q = 0..15, 16..31) and a
// two-table permute indexes them by the low 5 bits of each lane, shifted to the field: one shift
// and one permute per 16 weights. Without kLut, U5Field gives a field's 16 quants in f32.
template <class I, class T>
struct PackedQ5 {
  using V = typename I::V;
  static constexpr int kGroupChunks = 3;
  static const float* Scales(const uint8_t* row, int64_t k) {
    return reinterpret_cast<const float*>(row + Q5Groups(k / 32) * kQ5GroupBytes);
  }
  struct Group {
    typename I::IV lanes;
    const float* sc;  // the scales of the group's first block
  };
  // c: the group's first chunk.
  static Group LoadGroup(const uint8_t* row, int64_t c, int64_t k) {
    return Group{I::LoadLanes(row + c / kQ5GroupBlocks * kQ5GroupBytes, 4),
                 Scales(row, k) + T::kScales * c};
  }
  template <int B>
  static void GroupChunk(const Group& gr, V* w) {
    V lo, hi;
    T::template Tables<I>(gr.sc + T::kScales * B, &lo, &hi);
    w[0] = I::Perm2(I::template Srl<10 * B>(gr.lanes), lo, hi);
    w[1] = I::Perm2(I::template Srl<10 * B + 5>(gr.lanes), lo, hi);
  }
  static void Decode(const uint8_t* row, int64_t c, int64_t k, V* w) {
    const int64_t b = c % kQ5GroupBlocks;
    if constexpr (I::kLut) {
      const Group gr = LoadGroup(row, c - b, k);
      if (b == 0) {
        GroupChunk<0>(gr, w);
      } else if (b == 1) {
        GroupChunk<1>(gr, w);
      } else {
        GroupChunk<2>(gr, w);
      }
    } else {
      const uint8_t* group = row + c / kQ5GroupBlocks * kQ5GroupBytes;
      I::U5Field(group, static_cast<int>(2 * b), w);
      I::U5Field(group, static_cast<int>(2 * b + 1), w + 16 / I::kLanes);
      T::template Scale<I>(Scales(row, k) + T::kScales * c, w);
    }
  }
};

struct Q5_0Math {
  static constexpr int kScales = 1;
  template <class I>
  static void Tables(const float* sc, typename I::V* lo, typename I::V* hi) {
    const typename I::V d = I::Set1(sc[0]);
    *lo = I::Mul(d, I::Sub(I::Iota16(), I::Set1(16.f)));  // d·(q − 16), q = 0..15
    *hi = I::Mul(d, I::Iota16());                         // q = 16..31
  }
  template <class I>
  static void Scale(const float* sc, typename I::V* w) {
    const typename I::V d = I::Set1(sc[0]), sixteen = I::Set1(16.f);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Mul(d, I::Sub(w[p], sixteen));
  }
};

struct Q5_1Math {
  static constexpr int kScales = 2;
  template <class I>
  static void Tables(const float* sc, typename I::V* lo, typename I::V* hi) {
    const typename I::V d = I::Set1(sc[0]), m = I::Set1(sc[1]);
    *lo = I::Add(I::Mul(d, I::Iota16()), m);  // d·q + m, q = 0..15
    *hi = I::Add(I::Mul(d, I::Add(I::Iota16(), I::Set1(16.f))), m);
  }
  template <class I>
  static void Scale(const float* sc, typename I::V* w) {
    const typename I::V d = I::Set1(sc[0]), m = I::Set1(sc[1]);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Add(I::Mul(d, w[p]), m);
  }
};

template <class I>
internal::GemvFn SelectQ5(GgmlType type, bool packed) {
  switch (type) {
    case GgmlType::kQ5_0:
      return packed ? &Gemv<I, PackedQ5<I, Q5_0Math>> : &Gemv<I, Q5_0<I>>;
    case GgmlType::kQ5_1:
      return packed ? &Gemv<I, PackedQ5<I, Q5_1Math>> : &Gemv<I, Q5_1<I>>;
    case GgmlType::kQ5_K:
      return packed ? nullptr : &Gemv<I, Q5_K<I>>;
    default:
      return nullptr;
  }
}

template <class I>
internal::DequantFn SelectQ5Dequant(GgmlType type, bool packed) {
  switch (type) {
    case GgmlType::kQ5_0:
      return packed ? &DequantRows<I, PackedQ5<I, Q5_0Math>> : &DequantRows<I, Q5_0<I>>;
    case GgmlType::kQ5_1:
      return packed ? &DequantRows<I, PackedQ5<I, Q5_1Math>> : &DequantRows<I, Q5_1<I>>;
    case GgmlType::kQ5_K:
      return packed ? nullptr : &DequantRows<I, Q5_K<I>>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace tandem::quant::impl
