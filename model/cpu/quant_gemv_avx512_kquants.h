// The AVX-512 GEMVs for Q4_K, Q5_K and Q6_K rows in the file's layout, with each sub-block's
// scale factored out of its dot product — quant_gemv_avx2_q4k.h's, _q5k.h's and _q6k.h's
// kernels (their headers state the arithmetic) on 16-lane vectors. Included only by
// quant_gemv_avx512.cc.
//
// A super-block is four "pairs" of 64 consecutive elements. Each pair's quants become one vector
// of 16 dwords: dwords 0..7 hold elements 4i + b (dword i, byte b) of its first 32 elements,
// dwords 8..15 those of its last 32, each q in the low bits of its byte —
//   Q4_K pair P (sub-blocks 2P, 2P + 1): the 32 quant bytes qs[32P ..] broadcast to both
//     256-bit halves, the second half shifted right by 4 (high nibbles); Q5_K the same, with
//     the fifth bits of the 32 qh bytes rotated into bit 4 (Q5KPairs);
//   Q6_K pair 2h + p (half h, quarters 2p, 2p + 1): the half's 64 low-bit bytes as they are
//     (dwords 8..15 are quarter 1's / 3's bytes) for the nibbles, and its 32 high-bit bytes
//     broadcast and shifted per half (sllv / srlv) to bring each quarter's two bits to bits 4, 5.
// Masking with (0x0F, 0x1F or 0x3F) << 8b leaves q·2^{8b}, exact in f32, against an activation copy
// in that order scaled by 2^{−8b} (PairActivations): each product is q·x bit for bit. Lanes of the
// vector belong to sub-blocks by fours (Q6_K, 16 elements) or eights (Q4_K/Q5_K, 32), so a
// pair's scale is a permute of the super-block's scales. The offsets' part (Q4_K/Q5_K: mins; Q6_K:
// 32·D_t) is one FMA per super-block against the 16-element sums of x. A super-block's four
// pairs are one partial sum. Each output's operations depend only on its weight row and
// activation row, never on the batch.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/cpu/quant_gemv_impl.h"

namespace tandem::quant::impl {
namespace {  // one copy, in quant_gemv_avx512.cc

// x [m][k] in the kernels' order into out [m][k]: in each 64-element pair, position 16b + i
// holds element 4i + b (i < 8) or 32 + 4(i − 8) + b (i >= 8), times 2^{−8b}; and the 16-element
// sums of x into sums [m][k / 16].
inline void PairActivations(const float* x, int64_t m, int64_t k, float* out, float* sums) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k; c += 64) {
      const float* src = x + i * k + c;
      float* dst = out + i * k + c;
      for (int b = 0; b < 4; ++b) {
        const float f = std::ldexp(1.f, -8 * b);
        for (int t = 0; t < 8; ++t) {
          dst[16 * b + t] = src[4 * t + b] * f;
          dst[16 * b + 8 + t] = src[32 + 4 * t + b] * f;
        }
      }
    }
    for (int64_t s = 0; s < k / 16; ++s) {
      sums[i * (k / 16) + s] = _mm512_reduce_add_ps(_mm512_loadu_ps(x + i * k + 16 * s));
    }
  }
}

// Lanes 0..15 = v[lanes / group].
template <int kGroup>
[[gnu::always_inline]] inline __m512 Spread(__m512 v, int first) {
  __m512i idx;
  if constexpr (kGroup == 4) {
    idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  } else if constexpr (kGroup == 8) {
    idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  } else {
    idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  }
  return _mm512_permutexvar_ps(_mm512_add_epi32(idx, _mm512_set1_epi32(first)), v);
}

// A Q4_K / Q5_K super-block's 8 sub-block scales d·scale_j (lanes 0..7 of d1) and mins
// dmin·min_j, spread to lane t = dmin·min_{t/2} against the 16-element sums (offsets): the
// 6-bit fields of all 8 at once (dequant.cc's Q4KScaleMin), the products as dequant.cc's.
[[gnu::always_inline]] inline void KScalesMins(const uint8_t* blk, __m512* d1, __m512* offsets) {
  uint32_t u[3];
  std::memcpy(u, blk + 4, sizeof u);
  const uint64_t sc = (u[0] & 0x3f3f3f3fu) |
                      uint64_t{(u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4)} << 32;
  const uint64_t mn = (u[1] & 0x3f3f3f3fu) |
                      uint64_t{((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4)}
                          << 32;
  *d1 = _mm512_mul_ps(
      _mm512_set1_ps(_cvtsh_ss(LoadU16(blk))),
      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(sc)))));
  const __m512 m1 = _mm512_mul_ps(
      _mm512_set1_ps(_cvtsh_ss(LoadU16(blk + 2))),
      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn)))));
  *offsets = Spread<2>(m1, 0);
}

// The 32 quant bytes of sub-blocks 2P, 2P + 1 (low, high nibbles) broadcast, the second half
// shifted right by 4: sub-block 2P's nibbles in bits 8b .. 8b + 3 of dwords 0..7, 2P + 1's in
// dwords 8..15 (the bits above are the next nibble's; the kernels' field masks drop them).
[[gnu::always_inline]] inline __m512i KNibbles(const uint8_t* qs32) {
  return _mm512_srlv_epi32(
      _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs32))),
      _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4));
}

struct Q4KPairs {
  static constexpr int64_t kBytes = 144;
  __m512 d1;       // lanes 0..7: d·scale_j
  __m512 offsets;  // lane t: dmin·min_{t/2}
  const uint8_t* qs;
  Q4KPairs() = default;
  explicit Q4KPairs(const uint8_t* blk) : qs(blk + 16) { KScalesMins(blk, &d1, &offsets); }
  template <int P>
  [[gnu::always_inline]] void Pair(__m512* q, __m512* d) const {
    const __m512i v = KNibbles(qs + 32 * P);
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) {
      q[b] = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0f << (8 * b))));
    }
    *d = Spread<8>(d1, 2 * P);
  }
};

// Q5_K: Q4_K's scales and nibbles, and bit j of qh[l] as element l's fifth bit in sub-block j.
// The 32 qh bytes are broadcast and rotated per half so that bit 2P (dwords 0..7) or 2P + 1
// (8..15) of each byte lands on bit 4 of the same byte; a bitwise select then puts the nibble
// under it (bits 5..7 are left over, dropped by the 0x1F field masks).
struct Q5KPairs {
  static constexpr int64_t kBytes = 176;
  __m512 d1, offsets;
  __m512i qh;
  const uint8_t* qs;
  Q5KPairs() = default;
  explicit Q5KPairs(const uint8_t* blk)
      : qh(_mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)))),
        qs(blk + 48) {
    KScalesMins(blk, &d1, &offsets);
  }
  template <int P>
  [[gnu::always_inline]] void Pair(__m512* q, __m512* d) const {
    constexpr int r0 = (36 - 2 * P) % 32, r1 = (35 - 2 * P) % 32;  // rotate bit 2P (+1) to bit 4
    const __m512i fifth = _mm512_rolv_epi32(
        qh, _mm512_setr_epi32(r0, r0, r0, r0, r0, r0, r0, r0, r1, r1, r1, r1, r1, r1, r1, r1));
    // Bits 0..3 from the nibbles, 4..7 from the rotated qh ((c & a) | (~c & b), c = 0x0F).
    const __m512i v =
        _mm512_ternarylogic_epi32(KNibbles(qs + 32 * P), fifth, _mm512_set1_epi8(0x0f), 0xe4);
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) {
      q[b] = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x1f << (8 * b))));
    }
    *d = Spread<8>(d1, 2 * P);
  }
};

struct Q6KPairs {
  static constexpr int64_t kBytes = 210;
  __m512 dt;       // D_t = d·S_t, t = 0..15 (exact)
  __m512 offsets;  // 32·D_t
  const uint8_t* blk;
  Q6KPairs() = default;
  explicit Q6KPairs(const uint8_t* b) : blk(b) {
    dt = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(LoadU16(blk + 208))),
                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)))));
    offsets = _mm512_mul_ps(_mm512_set1_ps(32.f), dt);
  }
  template <int P>
  [[gnu::always_inline]] void Pair(__m512* q, __m512* d) const {
    constexpr int h = P / 2, p = P % 2;
    const __m512i l = _mm512_loadu_si512(blk + 64 * h);
    const __m512i hb = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i nib =
        p == 0 ? _mm512_and_si512(l, low4) : _mm512_and_si512(_mm512_srli_epi32(l, 4), low4);
    const __m512i top =
        p == 0 ? _mm512_sllv_epi32(
                     hb, _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2))
               : _mm512_srlv_epi32(
                     hb, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2));
    const __m512i v = _mm512_or_si512(nib, _mm512_and_si512(top, _mm512_set1_epi8(0x30)));
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) {
      q[b] = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x3f << (8 * b))));
    }
    *d = Spread<4>(dt, 4 * P);
  }
};

// part[i] (+)= d · Σ_b q[b]·x_i[16b .. 16b + 15] for MB activation rows.
template <int MB, bool kFirst>
[[gnu::always_inline]] inline void PairDots(__m512 (&part)[MB], const __m512 (&q)[4], __m512 d,
                                            const float* x, int64_t k) {
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
    const float* xi = x + i * k;
    __m512 sum = _mm512_mul_ps(q[0], _mm512_loadu_ps(xi));
    sum = _mm512_fmadd_ps(q[1], _mm512_loadu_ps(xi + 16), sum);
    sum = _mm512_fmadd_ps(q[2], _mm512_loadu_ps(xi + 32), sum);
    sum = _mm512_fmadd_ps(q[3], _mm512_loadu_ps(xi + 48), sum);
    part[i] = kFirst ? _mm512_mul_ps(sum, d) : _mm512_fmadd_ps(sum, d, part[i]);
  }
}

template <class K, int MB, int P>
[[gnu::always_inline]] inline void PairStep(__m512 (&part)[MB], const K& blk, const float* x,
                                            int64_t k) {
  __m512 q[4], d;
  blk.template Pair<P>(q, &d);
  PairDots<MB, P == 0>(part, q, d, x + 64 * P, k);
}

// Pair P of NB weight rows against one activation row: PairStep<K, 1, P>'s operations per row,
// the four activation vectors loaded once.
template <class K, int NB, int P>
[[gnu::always_inline]] inline void PairStepRows(__m512 (&part)[NB], const K (&blk)[NB],
                                                const float* x) {
  const float* xp = x + 64 * P;
  const __m512 x0 = _mm512_loadu_ps(xp), x1 = _mm512_loadu_ps(xp + 16),
               x2 = _mm512_loadu_ps(xp + 32), x3 = _mm512_loadu_ps(xp + 48);
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
    __m512 q[4], d;
    blk[r].template Pair<P>(q, &d);
    __m512 sum = _mm512_mul_ps(q[0], x0);
    sum = _mm512_fmadd_ps(q[1], x1, sum);
    sum = _mm512_fmadd_ps(q[2], x2, sum);
    sum = _mm512_fmadd_ps(q[3], x3, sum);
    part[r] = P == 0 ? _mm512_mul_ps(sum, d) : _mm512_fmadd_ps(sum, d, part[r]);
  }
}

// Outputs of weight row n for activation rows [m0, m0 + MB) (x: PairActivations' copy; sums:
// the 16-element sums).
template <class K, int MB>
void KQuantRowsBlock(const GemvArgs& a, int64_t n, int64_t m0, const float* x, const float* sums) {
  const int64_t k = a.w.k, supers = k / 256;
  const uint8_t* row = a.w.data + n * a.w.row_bytes;
  __m512 acc[MB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) acc[i] = _mm512_setzero_ps();
  const float* xm = x + m0 * k;
  // Prefetched ~2 KiB ahead (the hardware prefetchers stop at each 4 KiB page).
  const int64_t ahead = (2048 + a.w.row_bytes - 1) / a.w.row_bytes + 1;
  const char* prefetch = reinterpret_cast<const char*>(a.w.data + (n + ahead) * a.w.row_bytes);
  for (int64_t s = 0; s < supers; ++s) {
    for (int64_t o = 0; o < K::kBytes + 63; o += 64) {
      _mm_prefetch(prefetch + s * K::kBytes + o, _MM_HINT_T0);
    }
    const K blk(row + s * K::kBytes);
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      acc[i] = _mm512_fnmadd_ps(blk.offsets, _mm512_loadu_ps(sums + (m0 + i) * (k / 16) + 16 * s),
                                acc[i]);
    }
    __m512 part[MB];
    const float* xs = xm + 256 * s;
    PairStep<K, MB, 0>(part, blk, xs, k);
    PairStep<K, MB, 1>(part, blk, xs, k);
    PairStep<K, MB, 2>(part, blk, xs, k);
    PairStep<K, MB, 3>(part, blk, xs, k);
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) acc[i] = _mm512_add_ps(acc[i], part[i]);
  }
  float v[1][MB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) v[0][i] = _mm512_reduce_add_ps(acc[i]);
  StoreResults<1, MB>(a, n, m0, v);
}

// Outputs of weight rows [n, n + NB) for activation row m0 (batch-1 decode): the rows share each
// activation load, and each row's operations are KQuantRowsBlock<K, 1>'s, in the same order.
template <class K, int NB>
void KQuantRowsSingle(const GemvArgs& a, int64_t n, int64_t m0, const float* x, const float* sums) {
  const int64_t k = a.w.k, supers = k / 256;
  const uint8_t* rows = a.w.data + n * a.w.row_bytes;
  __m512 acc[NB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) acc[r] = _mm512_setzero_ps();
  const float* xm = x + m0 * k;
  const float* sm = sums + m0 * (k / 16);
  const int64_t ahead = (2048 + a.w.row_bytes - 1) / a.w.row_bytes + NB;
  const char* prefetch = reinterpret_cast<const char*>(a.w.data + (n + ahead) * a.w.row_bytes);
  const int64_t step = NB * a.w.row_bytes / supers;
  for (int64_t s = 0; s < supers; ++s) {
    for (int64_t o = s * step; o < (s + 1) * step; o += 64) _mm_prefetch(prefetch + o, _MM_HINT_T0);
    K blk[NB];
    const __m512 sum16 = _mm512_loadu_ps(sm + 16 * s);
#pragma GCC unroll 16
    for (int r = 0; r < NB; ++r) {
      blk[r] = K(rows + r * a.w.row_bytes + s * K::kBytes);
      acc[r] = _mm512_fnmadd_ps(blk[r].offsets, sum16, acc[r]);
    }
    __m512 part[NB];
    const float* xs = xm + 256 * s;
    PairStepRows<K, NB, 0>(part, blk, xs);
    PairStepRows<K, NB, 1>(part, blk, xs);
    PairStepRows<K, NB, 2>(part, blk, xs);
    PairStepRows<K, NB, 3>(part, blk, xs);
#pragma GCC unroll 16
    for (int r = 0; r < NB; ++r) acc[r] = _mm512_add_ps(acc[r], part[r]);
  }
  float v[NB][1];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) v[r][0] = _mm512_reduce_add_ps(acc[r]);
  StoreResults<NB, 1>(a, n, m0, v);
}

// All m rows of outputs [n_begin, n_end), in tiles of 32 weight rows: blocks of 8 activation
// rows, then 4, 2, one weight row at a time; a single activation row (batch-1 decode) two weight
// rows at a time, which share its loads (hot m = 1, one thread, loaded machine: Q4_K +3–8 %,
// Q6_K +7–10 %; four rows lost on Q6_K streamed from memory).
template <class K>
void KQuantGemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.w.k;
  thread_local std::vector<float> x, sums;
  x.resize(static_cast<size_t>(a.m * k));
  sums.resize(static_cast<size_t>(a.m * (k / 16)));
  PairActivations(a.x, a.m, k, x.data(), sums.data());
  constexpr int64_t kTile = 32;
  for (int64_t t = n_begin; t < n_end; t += kTile) {
    const int64_t te = t + kTile < n_end ? t + kTile : n_end;
    int64_t m0 = 0;
    for (; m0 + 8 <= a.m; m0 += 8) {
      for (int64_t n = t; n < te; ++n) KQuantRowsBlock<K, 8>(a, n, m0, x.data(), sums.data());
    }
    if (a.m - m0 >= 4) {
      for (int64_t n = t; n < te; ++n) KQuantRowsBlock<K, 4>(a, n, m0, x.data(), sums.data());
      m0 += 4;
    }
    if (a.m - m0 >= 2) {
      for (int64_t n = t; n < te; ++n) KQuantRowsBlock<K, 2>(a, n, m0, x.data(), sums.data());
      m0 += 2;
    }
    if (a.m - m0 >= 1) {
      int64_t n = t;
      for (; n + 2 <= te; n += 2) KQuantRowsSingle<K, 2>(a, n, m0, x.data(), sums.data());
      for (; n < te; ++n) KQuantRowsBlock<K, 1>(a, n, m0, x.data(), sums.data());
    }
  }
}

}  // namespace
}  // namespace tandem::quant::impl
