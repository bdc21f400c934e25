// The quantised GEMV kernels, written once over an ISA traits type I. Included only by
// quant_gemv_avx512.cc and quant_gemv_avx2.cc; everything here is in an anonymous namespace, so
// the two ISA builds of it never meet at link time.
//
// I provides: V (a vector of kLanes floats, kLanes 8 or 16), Zero, Set1, Load, Mul, Add, Sub,
// Fma, ReduceAdd, ReduceN<N> (N sums at once), and the widening loads U8x16 / I8x16 (16 bytes → 16
// floats in 16 / kLanes vectors), F16x16, Bf16x16 (16 halves → 16 floats) and the scalar F16
// conversion F16ToF32. With kLut (16 lanes), 4-bit types decode by table: the block's 16 possible
// weights are computed once (Iota16 = 0..15, Iota16Minus8 = −8..7) and Lut16 permutes them by the
// low nibble of each of 16 bytes — two vector ops per 16 weights instead of four. Packed 4-bit rows
// (quant_gemv.h lane groups) go further: IV holds 16 lanes as dwords (LoadLanes: a 64-byte
// group as it is, 2- and 1-byte lanes widened), Srl<S> shifts every lane right by S bits and
// Perm(idx, table) permutes by each lane's low nibble, so a 4-block group costs one load, a
// shift and a permute per 16 weights. Without kLut, U4Lanes gives block b of a group as the
// 32 nibble values in f32.
//
// Every decoder produces the 32 weights of chunk c (elements [32c, 32c+32)) of a row with the
// operations of model/format/dequant.cc in the same order — mul then add, never fused (the
// kernel files are compiled with -ffp-contract=off) — so the expanded weights are bit-identical
// to the dequantised model's (up to the sign of zero: Q6_K's d·(S·q) is −0 where dequant.cc's
// integer S·q is +0).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/cpu/quant_gemv.h"

namespace tandem::quant::impl {
namespace {  // one copy per including ISA file

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class I>
struct Chunk {
  static constexpr int kVecs = 32 / I::kLanes;
  using V = typename I::V;
};

// Nibbles of 16 bytes: low (elements 0..15 of a Q4 block) and high (16..31).
inline __m128i LowNibbles(__m128i q) { return _mm_and_si128(q, _mm_set1_epi8(0x0f)); }
inline __m128i HighNibbles(__m128i q) {
  return _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
}

template <class I>
struct Q8_0 {
  static constexpr int64_t kBlock = 32, kBytes = 34;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    const uint8_t* b = row + c * kBytes;
    const typename I::V d = I::Set1(I::F16ToF32(LoadU16(b)));
    I::I8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), w);
    I::I8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)), w + 16 / I::kLanes);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Mul(d, w[p]);
  }
};

template <class I>
struct Q4_0 {
  static constexpr int64_t kBlock = 32, kBytes = 18;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    const uint8_t* b = row + c * kBytes;
    const typename I::V d = I::Set1(I::F16ToF32(LoadU16(b)));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    if constexpr (I::kLut) {
      // The block's 16 possible weights d·(q − 8), then one permute per 16 weights.
      const typename I::V table = I::Mul(d, I::Iota16Minus8());
      I::Lut16(q, table, w);
      I::Lut16(_mm_srli_epi16(q, 4), table, w + 1);
      return;
    }
    const __m128i eight = _mm_set1_epi8(8);
    I::I8x16(_mm_sub_epi8(LowNibbles(q), eight), w);
    I::I8x16(_mm_sub_epi8(HighNibbles(q), eight), w + 16 / I::kLanes);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Mul(d, w[p]);
  }
};

template <class I>
struct Q4_1 {
  static constexpr int64_t kBlock = 32, kBytes = 20;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    const uint8_t* b = row + c * kBytes;
    const typename I::V d = I::Set1(I::F16ToF32(LoadU16(b)));
    const typename I::V m = I::Set1(I::F16ToF32(LoadU16(b + 2)));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    if constexpr (I::kLut) {
      const typename I::V table = I::Add(I::Mul(d, I::Iota16()), m);  // d·q + m for q = 0..15
      I::Lut16(q, table, w);
      I::Lut16(_mm_srli_epi16(q, 4), table, w + 1);
      return;
    }
    I::U8x16(LowNibbles(q), w);
    I::U8x16(HighNibbles(q), w + 16 / I::kLanes);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Add(I::Mul(d, w[p]), m);
  }
};

// Q4_K: chunk c is sub-block c % 8 of super-block c / 8.
inline void Q4KScaleMin(int j, const uint8_t* s, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <class I>
struct Q4_K {
  static constexpr int64_t kBlock = 256, kBytes = 144;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int j = static_cast<int>(c & 7);
    const float d = I::F16ToF32(LoadU16(b));
    const float dmin = I::F16ToF32(LoadU16(b + 2));
    int sc, mn;
    Q4KScaleMin(j, b + 4, &sc, &mn);
    const typename I::V d1 = I::Set1(d * static_cast<float>(sc));
    const typename I::V m1 = I::Set1(dmin * static_cast<float>(mn));
    const uint8_t* q = b + 16 + 32 * (j >> 1);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16));
    if constexpr (I::kLut) {
      const typename I::V table = I::Sub(I::Mul(d1, I::Iota16()), m1);  // d1·q − m1, q = 0..15
      const int shift = (j & 1) * 4;
      I::Lut16(_mm_srli_epi16(q0, shift), table, w);
      I::Lut16(_mm_srli_epi16(q1, shift), table, w + 1);
      return;
    }
    if ((j & 1) == 0) {
      I::U8x16(LowNibbles(q0), w);
      I::U8x16(LowNibbles(q1), w + 16 / I::kLanes);
    } else {
      I::U8x16(HighNibbles(q0), w);
      I::U8x16(HighNibbles(q1), w + 16 / I::kLanes);
    }
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Sub(I::Mul(d1, w[p]), m1);
  }
};

// Q6_K: chunk c is chunk kk = c % 4 of half (c / 4) % 2 of super-block c / 8. Its 16-element
// halves use scales S[2kk] and S[2kk + 1]; d·(S·q) with S·q exact in f32, as dequant.cc.
template <class I>
struct Q6_K {
  static constexpr int64_t kBlock = 256, kBytes = 210;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int half = static_cast<int>((c >> 2) & 1), kk = static_cast<int>(c & 3);
    const uint8_t* L = b + 64 * half + (kk & 1) * 32;
    const uint8_t* H = b + 128 + 32 * half;
    const int8_t* S = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * kk;
    const typename I::V d = I::Set1(I::F16ToF32(LoadU16(b + 208)));
    const __m128i lshift = _mm_cvtsi32_si128((kk >> 1) * 4);
    const __m128i hshift = _mm_cvtsi32_si128(2 * kk);
#pragma GCC unroll 16
    for (int h = 0; h < 2; ++h) {
      const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(L + 16 * h));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(H + 16 * h));
      // 16-bit shifts move bits across byte boundaries; the masks keep each byte's own bits.
      const __m128i lo4 = _mm_and_si128(_mm_srl_epi16(l, lshift), _mm_set1_epi8(0x0f));
      const __m128i hi2 = _mm_and_si128(_mm_srl_epi16(hi, hshift), _mm_set1_epi8(0x03));
      const __m128i q = _mm_sub_epi8(_mm_or_si128(lo4, _mm_slli_epi16(hi2, 4)), _mm_set1_epi8(32));
      typename I::V* out = w + h * (16 / I::kLanes);
      I::I8x16(q, out);
      const typename I::V s = I::Set1(static_cast<float>(S[h]));
#pragma GCC unroll 16
      for (int p = 0; p < 16 / I::kLanes; ++p) out[p] = I::Mul(d, I::Mul(s, out[p]));
    }
  }
};

template <class I>
struct F16 {
  static constexpr int64_t kBlock = 1, kBytes = 2;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    I::F16x16(row + c * 64, w);
    I::F16x16(row + c * 64 + 32, w + 16 / I::kLanes);
  }
  static float Scalar(const uint8_t* row, int64_t k) { return I::F16ToF32(LoadU16(row + 2 * k)); }
};

template <class I>
struct Bf16 {
  static constexpr int64_t kBlock = 1, kBytes = 2;
  static void Decode(const uint8_t* row, int64_t c, typename I::V* w) {
    I::Bf16x16(row + c * 64, w);
    I::Bf16x16(row + c * 64 + 32, w + 16 / I::kLanes);
  }
  static float Scalar(const uint8_t* row, int64_t k) {
    const uint32_t bits = static_cast<uint32_t>(LoadU16(row + 2 * k)) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

// Packed rows (quant_gemv.h PackRows): quants back to back, then f32 scales. Same arithmetic as
// the file-layout decoders, scales broadcast straight from memory.
template <class I>
struct PackedQ8_0 {
  static void Decode(const uint8_t* row, int64_t c, int64_t k, typename I::V* w) {
    const float* sc = reinterpret_cast<const float*>(row + k);  // k/32 blocks x 32 bytes
    const typename I::V d = I::Set1(sc[c]);
    I::I8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 32 * c)), w);
    I::I8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 32 * c + 16)),
             w + 16 / I::kLanes);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Mul(d, w[p]);
  }
};

// Block c of a packed 4-bit row: its lane group (quant_gemv.h) and its byte within each lane.
struct LanePos {
  const uint8_t* group;
  int g, b;
};
inline LanePos LanePosOf(const uint8_t* row, int64_t c, int64_t k) {
  int64_t first = 0;
  int g = 1;
  LaneGroupOf(c, k / 32, &first, &g);
  return LanePos{row + 16 * first, g, static_cast<int>(c - first)};
}

// Both packed 4-bit types: the 16 weights a block's table holds (Table), then per chunk either a
// permute of the lanes (kLut) or the nibble values scaled as dequant.cc does (Scale). With kLut
// the kernels also take whole 4-block groups at once (kGroupChunks, LoadGroup, GroupChunk<B>),
// with every shift an immediate.
template <class I, class T>
struct PackedQ4 {
  using V = typename I::V;
  static constexpr int kGroupChunks = 4;
  static void Decode(const uint8_t* row, int64_t c, int64_t k, V* w) {
    const float* sc = reinterpret_cast<const float*>(row + k / 2) + T::kScales * c;
    const LanePos lp = LanePosOf(row, c, k);
    if constexpr (I::kLut) {
      I::LutLanes(lp.group, lp.g, lp.b, T::template Table<I>(sc), w);
    } else {
      I::U4Lanes(lp.group, lp.g, lp.b, w);
      T::template Scale<I>(sc, w);
    }
  }
  struct Group {
    typename I::IV lanes;
    const float* sc;
  };
  static Group LoadGroup(const uint8_t* row, int64_t c, int64_t k) {
    return Group{I::LoadLanes(row + 16 * c, 4),
                 reinterpret_cast<const float*>(row + k / 2) + T::kScales * c};
  }
  template <int B>
  static void GroupChunk(const Group& gr, V* w) {
    const V table = T::template Table<I>(gr.sc + T::kScales * B);
    w[0] = I::Perm(I::template Srl<8 * B>(gr.lanes), table);
    w[1] = I::Perm(I::template Srl<8 * B + 4>(gr.lanes), table);
  }
};

struct Q4_0Math {
  static constexpr int kScales = 1;
  template <class I>
  static typename I::V Table(const float* sc) {  // d·(q − 8), q = 0..15
    return I::Mul(I::Set1(sc[0]), I::Iota16Minus8());
  }
  template <class I>
  static void Scale(const float* sc, typename I::V* w) {
    const typename I::V d = I::Set1(sc[0]), eight = I::Set1(8.f);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Mul(d, I::Sub(w[p], eight));  // q − 8 exact
  }
};

struct Q4_1Math {
  static constexpr int kScales = 2;
  template <class I>
  static typename I::V Table(const float* sc) {  // d·q + m, q = 0..15
    return I::Add(I::Mul(I::Set1(sc[0]), I::Iota16()), I::Set1(sc[1]));
  }
  template <class I>
  static void Scale(const float* sc, typename I::V* w) {
    const typename I::V d = I::Set1(sc[0]), m = I::Set1(sc[1]);
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) w[p] = I::Add(I::Mul(d, w[p]), m);
  }
};

template <class I>
using PackedQ4_0 = PackedQ4<I, Q4_0Math>;
template <class I>
using PackedQ4_1 = PackedQ4<I, Q4_1Math>;

// File-layout decoders take (row, chunk); packed ones also need k to find the scales.
template <class D, class V>
inline void DecodeChunk(const uint8_t* row, int64_t c, int64_t k, V* w) {
  if constexpr (requires { D::Decode(row, c, k, w); }) {
    D::Decode(row, c, k, w);
  } else {
    D::Decode(row, c, w);
  }
}

template <class D>
concept HasScalarTail = requires(const uint8_t* r) {
  D::Scalar(r, int64_t{0});
};

template <class D>
concept HasLaneGroups = requires {
  D::kGroupChunks;
};

// acc[r][i] += w[r] · x[i][chunk c] for NB decoded weight chunks and MB activation rows; each
// activation vector is loaded once for the NB weight rows.
template <class I, int NB, int MB, int kSplit>
[[gnu::always_inline]] inline void Accumulate(typename I::V (&acc)[NB][MB][kSplit],
                                              const typename I::V (&w)[NB][Chunk<I>::kVecs],
                                              const float* x, int64_t k, int64_t c) {
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
    const float* xi = x + i * k + 32 * c;
#pragma GCC unroll 16
    for (int p = 0; p < Chunk<I>::kVecs; ++p) {
      const typename I::V xv = I::Load(xi + p * I::kLanes);
#pragma GCC unroll 16
      for (int r = 0; r < NB; ++r) {
        typename I::V& slot = acc[r][i][kSplit == 1 ? 0 : p];
        slot = I::Fma(w[r][p], xv, slot);
      }
    }
  }
}

// Chunk c + B of NB rows whose 4-block lane groups are loaded, into the accumulators.
template <class I, class D, int NB, int MB, int kSplit, int B>
[[gnu::always_inline]] inline void GroupStep(typename I::V (&acc)[NB][MB][kSplit],
                                             const typename D::Group (&g)[NB], const float* x,
                                             int64_t k, int64_t c) {
  typename I::V w[NB][Chunk<I>::kVecs];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) D::template GroupChunk<B>(g[r], w[r]);
  Accumulate<I, NB, MB, kSplit>(acc, w, x, k, c + B);
}

// The NB·MB results with the epilogue: kStore and kAccumulate inline (one add, the same in
// every path), kSiluMul through the shared scalar function.
template <int NB, int MB>
[[gnu::always_inline]] inline void StoreResults(const GemvArgs& a, int64_t n, int64_t m0,
                                                float (&v)[NB][MB]) {
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      float s = v[r][i];
      if (a.bias != nullptr) s += a.bias[n + r];
      float* y = a.y + (m0 + i) * a.w.n + n + r;
      switch (a.epilogue) {
        case Epilogue::kStore:
          *y = s;
          break;
        case Epilogue::kAccumulate:
          *y += s;
          break;
        default:
          *y = internal::ApplyEpilogue(a.epilogue, s, *y,
                                       a.aux != nullptr ? a.aux[(m0 + i) * a.w.n + n + r] : 0.f);
      }
    }
  }
}

// Outputs of weight rows [n, n + NB) for activation rows [m0, m0 + MB): each chunk of the NB rows
// is decoded once and multiplied into all MB activation rows. One accumulator per (row,
// activation row), in every block shape — also the 1 × 1 and 1 × 2 blocks of a tile's last
// rows, whose single FMA chain is slower, so that an output is summed in the same order whatever
// block computes it (results independent of the batch size; quant_linear_test checks it).
template <class I, class D, int NB, int MB>
void RowsBlock(const GemvArgs& a, int64_t n, int64_t m0) {
  using V = typename I::V;
  constexpr int kVecs = Chunk<I>::kVecs;
  constexpr int kSplit = 1;  // accumulators per (row, activation row): see above
  const int64_t k = a.w.k;
  const int64_t chunks = k / 32;
  const float* x = a.x + m0 * k;
  const uint8_t* rows[NB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) rows[r] = a.w.data + (n + r) * a.w.row_bytes;
  V acc[NB][MB][kSplit];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 16
      for (int p = 0; p < kSplit; ++p) acc[r][i][p] = I::Zero();
    }
  }
  // The weight rows two blocks ahead are prefetched a slice per chunk: a tile's rows are one
  // contiguous stream, but the hardware prefetchers stop at every 4 KiB page, and a small
  // matrix's slice is only a few pages — without this, one core streams ~5 GB/s.
  const char* prefetch = reinterpret_cast<const char*>(a.w.data + (n + 2 * NB) * a.w.row_bytes);
  const int64_t prefetch_step = (NB * a.w.row_bytes + chunks - 1) / (chunks > 0 ? chunks : 1);
  auto prefetch_chunks = [&](int64_t from, int64_t count) {
    for (int64_t o = from * prefetch_step; o < (from + count) * prefetch_step; o += 64) {
      _mm_prefetch(prefetch + o, _MM_HINT_T0);
    }
  };
  int64_t c = 0;
  if constexpr (I::kLut && HasLaneGroups<D>) {
    constexpr int kG = D::kGroupChunks;  // 4 (packed 4-bit) or 3 (packed 5-bit)
    for (; c + kG <= chunks; c += kG) {
      prefetch_chunks(c, kG);
      typename D::Group g[NB];
#pragma GCC unroll 16
      for (int r = 0; r < NB; ++r) g[r] = D::LoadGroup(rows[r], c, k);
      GroupStep<I, D, NB, MB, kSplit, 0>(acc, g, x, k, c);
      GroupStep<I, D, NB, MB, kSplit, 1>(acc, g, x, k, c);
      GroupStep<I, D, NB, MB, kSplit, 2>(acc, g, x, k, c);
      if constexpr (kG == 4) GroupStep<I, D, NB, MB, kSplit, 3>(acc, g, x, k, c);
    }
  }
  for (; c < chunks; ++c) {
    prefetch_chunks(c, 1);
    V w[NB][kVecs];
#pragma GCC unroll 16
    for (int r = 0; r < NB; ++r) DecodeChunk<D>(rows[r], c, k, w[r]);
    Accumulate<I, NB, MB, kSplit>(acc, w, x, k, c);
  }
  V sums[NB * MB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      V sum = acc[r][i][0];
#pragma GCC unroll 16
      for (int p = 1; p < kSplit; ++p) sum = I::Add(sum, acc[r][i][p]);
      sums[r * MB + i] = sum;
    }
  }
  float v[NB][MB];
  I::template ReduceN<NB * MB>(sums, &v[0][0]);
  if constexpr (HasScalarTail<D>) {
#pragma GCC unroll 16
    for (int r = 0; r < NB; ++r) {
#pragma GCC unroll 16
      for (int i = 0; i < MB; ++i) {
        const float* xi = x + i * k;
        for (int64_t t = chunks * 32; t < k; ++t) v[r][i] += D::Scalar(rows[r], t) * xi[t];
      }
    }
  }
  StoreResults<NB, MB>(a, n, m0, v);
}

// Weight rows [n0, n1) against activation rows [m0, m0 + MB), NB rows at a time.
template <class I, class D, int NB, int MB>
void RowRange(const GemvArgs& a, int64_t n0, int64_t n1, int64_t m0) {
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) RowsBlock<I, D, NB, MB>(a, n, m0);
  for (; n < n1; ++n) RowsBlock<I, D, 1, MB>(a, n, m0);
}

// All m rows of outputs [n_begin, n_end): tiles of 32 weight rows (a few KB, they stay in L1
// while every block of activation rows passes over them). Blocks: I::kMaxRows activation rows
// × I::kBatchWeightRows weight rows, then smaller blocks for the remainder; a single activation
// row (batch-1 decode) takes 4 weight rows at a time. Every block shape sums each output in the
// same order (one accumulator, RowsBlock), so results do not depend on the batch size.
template <class I, class D>
void Gemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int kMaxRows = I::kMaxRows, kNb = I::kBatchWeightRows;
  constexpr int64_t kTile = 32;
  for (int64_t t = n_begin; t < n_end; t += kTile) {
    const int64_t te = t + kTile < n_end ? t + kTile : n_end;
    int64_t m0 = 0;
    for (; m0 + kMaxRows <= a.m; m0 += kMaxRows) RowRange<I, D, kNb, kMaxRows>(a, t, te, m0);
    if constexpr (kMaxRows > 4) {
      if (a.m - m0 >= 4) {
        RowRange<I, D, kNb, 4>(a, t, te, m0);
        m0 += 4;
      }
    }
    if constexpr (kMaxRows > 2) {
      if (a.m - m0 >= 2) {
        RowRange<I, D, 2, 2>(a, t, te, m0);
        m0 += 2;
      }
    }
    if (a.m - m0 >= 1) RowRange<I, D, 4, 1>(a, t, te, m0);
  }
}

// Rows [n0, n1) of the matrix as f32 into out ([n1 − n0][k]): dequant.cc's values.
template <class I, class D>
void DequantRows(const QuantMatrix& w, int64_t n0, int64_t n1, float* out) {
  using V = typename I::V;
  constexpr int kVecs = Chunk<I>::kVecs;
  const int64_t chunks = w.k / 32;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.data + n * w.row_bytes;
    float* dst = out + (n - n0) * w.k;
    for (int64_t c = 0; c < chunks; ++c) {
      V v[kVecs];
      DecodeChunk<D>(row, c, w.k, v);
#pragma GCC unroll 16
      for (int p = 0; p < kVecs; ++p) I::Store(dst + 32 * c + p * I::kLanes, v[p]);
    }
    if constexpr (HasScalarTail<D>) {
      for (int64_t t = chunks * 32; t < w.k; ++t) dst[t] = D::Scalar(row, t);
    }
  }
}

// The 5-bit types (quant_gemv_q5.h, included at the end of this header).
template <class I>
internal::GemvFn SelectQ5(GgmlType type, bool packed);
template <class I>
internal::DequantFn SelectQ5Dequant(GgmlType type, bool packed);

template <class I>
internal::DequantFn SelectDequant(GgmlType type, bool packed) {
  if (packed) {
    switch (type) {
      case GgmlType::kQ8_0:
        return &DequantRows<I, PackedQ8_0<I>>;
      case GgmlType::kQ4_0:
        return &DequantRows<I, PackedQ4_0<I>>;
      case GgmlType::kQ4_1:
        return &DequantRows<I, PackedQ4_1<I>>;
      default:
        return SelectQ5Dequant<I>(type, packed);
    }
  }
  switch (type) {
    case GgmlType::kQ8_0:
      return &DequantRows<I, Q8_0<I>>;
    case GgmlType::kQ4_0:
      return &DequantRows<I, Q4_0<I>>;
    case GgmlType::kQ4_1:
      return &DequantRows<I, Q4_1<I>>;
    case GgmlType::kQ4_K:
      return &DequantRows<I, Q4_K<I>>;
    case GgmlType::kQ6_K:
      return &DequantRows<I, Q6_K<I>>;
    case GgmlType::kF16:
      return &DequantRows<I, F16<I>>;
    case GgmlType::kBF16:
      return &DequantRows<I, Bf16<I>>;
    default:
      return SelectQ5Dequant<I>(type, packed);
  }
}

template <class I>
internal::GemvFn Select(GgmlType type, bool packed) {
  if (packed) {
    switch (type) {
      case GgmlType::kQ8_0:
        return &Gemv<I, PackedQ8_0<I>>;
      case GgmlType::kQ4_0:
        return &Gemv<I, PackedQ4_0<I>>;
      case GgmlType::kQ4_1:
        return &Gemv<I, PackedQ4_1<I>>;
      default:
        return SelectQ5<I>(type, packed);
    }
  }
  switch (type) {
    case GgmlType::kQ8_0:
      return &Gemv<I, Q8_0<I>>;
    case GgmlType::kQ4_0:
      return &Gemv<I, Q4_0<I>>;
    case GgmlType::kQ4_1:
      return &Gemv<I, Q4_1<I>>;
    case GgmlType::kQ4_K:
      return &Gemv<I, Q4_K<I>>;
    case GgmlType::kQ6_K:
      return &Gemv<I, Q6_K<I>>;
    case GgmlType::kF16:
      return &Gemv<I, F16<I>>;
    case GgmlType::kBF16:
      return &Gemv<I, Bf16<I>>;
    default:
      return SelectQ5<I>(type, packed);
  }
}

}  // namespace
}  // namespace tandem::quant::impl

#include "model/cpu/quant_gemv_q5.h"  // IWYU pragma: keep (the definitions of SelectQ5*)
