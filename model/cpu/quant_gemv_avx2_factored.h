// The AVX2 GEMV for packed Q4_0, Q4_1 and Q8_0 rows (quant_gemv.h PackRows), with each block's
// scale factored out of its dot product. Included only by quant_gemv_avx2.cc.
//
// A block of 32 weights is w_j = d·q_j + o (Q8_0: o = 0; Q4_0: q − 8 → o = −8d; Q4_1: o = m), so
//   Σ_j w_j·x_j = d·(Σ_j q_j·x_j) + o·(Σ_j x_j).
// The kernel computes S = Σ q·x per block with the integer quants converted to f32 (exact) and
// four multiply-adds per 32 weights, adds d·S into the row's accumulator, and takes the offsets'
// part as one dot product per row of its scale array with per-block sums of x (computed once per
// call and shared by every weight row). Per 8 weights that is an AND, a convert and an FMA — the
// exact-weight expansion costs a multiply and an add more per 8 weights on AVX2, which has no
// 16-entry permute to decode by table as the AVX-512 path does.
//
// Arithmetic: the same real numbers as the exact-weight kernels, rounded differently — products
// q·x and the partial sums are rounded instead of (d·q + m)·x. The error is of the same order
// (a few f32 ulps of Σ|d·q·x| + |o|·Σ|x| per block; quant_linear_test bounds every path by
// 1e-5·Σ|w·x|, and engine_real_model_test's logits stay within 1e-4 of the f32-dequantised model).
// Each output's sequence of operations depends only on its own weight row and activation row,
// not on how many rows are blocked together, so the results do not depend on the batch size
// within this kernel.
//
// 4-bit lane groups (quant_gemv.h): lane j of a group holds byte j of its g blocks, block b in
// bits 8b..8b+7. Masking with 0xF << 8b (no shift) leaves q·2^{8b}, which converts to f32
// exactly; the high nibbles come from the lanes shifted right by 4 once per group. The 2^{−8b}
// is folded into a copy of the activations made once per call (ScaledActivations), so
// (q·2^{8b})·(x·2^{−8b}) is the product q·x itself, bit for bit: per 8 weights one AND, one
// convert and one FMA, and no per-block rescale. (Measured on Zen 5, one thread, L2-resident
// 1536×576 Q4_1: 20 → 26 G weights/s against an OR/subtract magic-number conversion with the
// scale unscaled per block, and one weight row per pass rather than two — the 16 ymm registers
// do not hold two rows' decoded quants.)

#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/cpu/quant_gemv_impl.h"

namespace tandem::quant::impl {
namespace {  // one copy, in quant_gemv_avx2.cc

enum class PackedKind : uint8_t { kQ8_0, kQ4_0, kQ4_1 };

constexpr int ScaleStride(PackedKind p) { return p == PackedKind::kQ4_1 ? 2 : 1; }
constexpr int64_t QuantBytes(PackedKind p) { return p == PackedKind::kQ8_0 ? 32 : 16; }

inline float HorizontalSum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// The offsets' multipliers of one activation row x [k]: Q4_0 −8·Σx per block, Q4_1 (0, Σx) per
// block (beside the row's (d, m) pairs), zero-padded to a multiple of 8. Returns the length.
template <PackedKind P>
int64_t OffsetSums(const float* x, int64_t k, float* out) {
  const int64_t blocks = k / 32, len = (blocks * ScaleStride(P) + 7) & ~int64_t{7};
  for (int64_t c = 0; c < blocks; ++c) {
    const float* xc = x + 32 * c;
    const __m256 s =
        _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xc), _mm256_loadu_ps(xc + 8)),
                      _mm256_add_ps(_mm256_loadu_ps(xc + 16), _mm256_loadu_ps(xc + 24)));
    const float sum = HorizontalSum(s);
    if constexpr (P == PackedKind::kQ4_0) {
      out[c] = -8.f * sum;
    } else {
      out[2 * c] = 0.f;
      out[2 * c + 1] = sum;
    }
  }
  for (int64_t j = blocks * ScaleStride(P); j < len; ++j) out[j] = 0.f;
  return len;
}

// Σ sc[j]·osx[j] over the row's blocks·stride scales, 8 at a time (the last 8 masked: the scale
// array ends the row, possibly the matrix).
template <PackedKind P>
[[gnu::always_inline]] inline __m256 OffsetDot(const float* sc, const float* osx, int64_t blocks) {
  const int64_t n = blocks * ScaleStride(P);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(sc + j), _mm256_loadu_ps(osx + j), acc);
  if (j < n) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - j)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(sc + j, mask), _mm256_loadu_ps(osx + j), acc);
  }
  return acc;
}

// acc[r][i] += d[r]·Σ_p q[r][p]·x_i[32c + 8p].
template <int NB, int MB>
[[gnu::always_inline]] inline void BlockDots(__m256 (&acc)[NB][MB], const __m256 (&q)[NB][4],
                                             const __m256 (&d)[NB], const float* x, int64_t k,
                                             int64_t c) {
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
    const float* xi = x + i * k + 32 * c;
    const __m256 x0 = _mm256_loadu_ps(xi), x1 = _mm256_loadu_ps(xi + 8);
    const __m256 x2 = _mm256_loadu_ps(xi + 16), x3 = _mm256_loadu_ps(xi + 24);
#pragma GCC unroll 16
    for (int r = 0; r < NB; ++r) {
      __m256 s = _mm256_mul_ps(q[r][0], x0);
      s = _mm256_fmadd_ps(q[r][1], x1, s);
      s = _mm256_fmadd_ps(q[r][2], x2, s);
      s = _mm256_fmadd_ps(q[r][3], x3, s);
      acc[r][i] = _mm256_fmadd_ps(s, d[r], acc[r][i]);
    }
  }
}

// 16 lanes of a g-block lane group as dwords: v[0] lanes 0..7, v[1] lanes 8..15.
template <int G>
[[gnu::always_inline]] inline void LoadLaneDwords(const uint8_t* q, __m256i (&v)[2]) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    if constexpr (G == 4) {
      v[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * h));
    } else if constexpr (G == 2) {
      v[h] = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h)));
    } else {
      v[h] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * h)));
    }
  }
}

// Block `first` + B of a lane group whose lanes are loaded (lo) and shifted right by 4 (hi):
// quants q·2^{8B} as f32, against activations scaled by 2^{−8B} (ScaledActivations).
template <PackedKind P, int NB, int MB, int B>
[[gnu::always_inline]] inline void LaneGroupBlock(__m256 (&acc)[NB][MB], const __m256i (&lo)[NB][2],
                                                  const __m256i (&hi)[NB][2],
                                                  const float* const (&sc)[NB], const float* x,
                                                  int64_t k, int64_t first) {
  const __m256i mask = _mm256_set1_epi32(0x0f << (8 * B));
  const int64_t c = first + B;
  __m256 q[NB][4], d[NB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
    q[r][0] = _mm256_cvtepi32_ps(_mm256_and_si256(lo[r][0], mask));  // elements 0..7
    q[r][1] = _mm256_cvtepi32_ps(_mm256_and_si256(lo[r][1], mask));  // 8..15
    q[r][2] = _mm256_cvtepi32_ps(_mm256_and_si256(hi[r][0], mask));  // 16..23
    q[r][3] = _mm256_cvtepi32_ps(_mm256_and_si256(hi[r][1], mask));  // 24..31
    d[r] = _mm256_broadcast_ss(sc[r] + ScaleStride(P) * c);
  }
  BlockDots<NB, MB>(acc, q, d, x, k, c);
}

template <PackedKind P, int NB, int MB, int G>
[[gnu::always_inline]] inline void LaneGroup(__m256 (&acc)[NB][MB],
                                             const uint8_t* const (&rows)[NB],
                                             const float* const (&sc)[NB], const float* x,
                                             int64_t k, int64_t first) {
  __m256i lo[NB][2], hi[NB][2];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
    LoadLaneDwords<G>(rows[r] + 16 * first, lo[r]);
    hi[r][0] = _mm256_srli_epi32(lo[r][0], 4);
    hi[r][1] = _mm256_srli_epi32(lo[r][1], 4);
  }
  LaneGroupBlock<P, NB, MB, 0>(acc, lo, hi, sc, x, k, first);
  if constexpr (G >= 2) LaneGroupBlock<P, NB, MB, 1>(acc, lo, hi, sc, x, k, first);
  if constexpr (G == 4) {
    LaneGroupBlock<P, NB, MB, 2>(acc, lo, hi, sc, x, k, first);
    LaneGroupBlock<P, NB, MB, 3>(acc, lo, hi, sc, x, k, first);
  }
}

// Outputs of weight rows [n, n + NB) for activation rows [m0, m0 + MB); osx: those rows' offset
// sums (OffsetSums), ostride floats apart.
template <PackedKind P, int NB, int MB>
void FactoredRowsBlock(const GemvArgs& a, int64_t n, int64_t m0, const float* osx,
                       int64_t ostride) {
  const int64_t k = a.w.k, blocks = k / 32;
  const float* x = a.x + m0 * k;
  const uint8_t* rows[NB];
  const float* sc[NB];
  __m256 acc[NB][MB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
    rows[r] = a.w.data + (n + r) * a.w.row_bytes;
    sc[r] = reinterpret_cast<const float*>(rows[r] + blocks * QuantBytes(P));
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      acc[r][i] = P == PackedKind::kQ8_0 ? _mm256_setzero_ps()
                                         : OffsetDot<P>(sc[r], osx + i * ostride, blocks);
    }
  }
  // Prefetch as RowsBlock does (its comment: the hardware prefetchers stop at each 4 KiB page),
  // at least 2 KiB ahead: these rows can be a few hundred bytes.
  const int64_t ahead = std::max<int64_t>(2 * NB, (2048 + a.w.row_bytes - 1) / a.w.row_bytes);
  const char* prefetch = reinterpret_cast<const char*>(a.w.data + (n + ahead) * a.w.row_bytes);
  const int64_t step = (NB * a.w.row_bytes + blocks - 1) / (blocks > 0 ? blocks : 1);
  auto prefetch_blocks = [&](int64_t from, int64_t count) {
    for (int64_t o = from * step; o < (from + count) * step; o += 64) {
      _mm_prefetch(prefetch + o, _MM_HINT_T0);
    }
  };
  if constexpr (P == PackedKind::kQ8_0) {
    for (int64_t c = 0; c < blocks; ++c) {
      prefetch_blocks(c, 1);
      __m256 q[NB][4], d[NB];
#pragma GCC unroll 16
      for (int r = 0; r < NB; ++r) {
        const uint8_t* qb = rows[r] + 32 * c;
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          q[r][p] = _mm256_cvtepi32_ps(
              _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qb + 8 * p))));
        }
        d[r] = _mm256_broadcast_ss(sc[r] + c);
      }
      BlockDots<NB, MB>(acc, q, d, x, k, c);
    }
  } else {
    int64_t c = 0;
    for (; c + 4 <= (blocks & ~int64_t{3}); c += 4) {
      prefetch_blocks(c, 4);
      LaneGroup<P, NB, MB, 4>(acc, rows, sc, x, k, c);
    }
    if ((blocks & 2) != 0) {
      prefetch_blocks(c, 2);
      LaneGroup<P, NB, MB, 2>(acc, rows, sc, x, k, c);
      c += 2;
    }
    if ((blocks & 1) != 0) {
      prefetch_blocks(c, 1);
      LaneGroup<P, NB, MB, 1>(acc, rows, sc, x, k, c);
    }
  }
  float v[NB][MB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) v[r][i] = HorizontalSum(acc[r][i]);
  }
  StoreResults<NB, MB>(a, n, m0, v);
}

template <PackedKind P, int NB, int MB>
void FactoredRowRange(const GemvArgs& a, int64_t n0, int64_t n1, int64_t m0, const float* osx,
                      int64_t ostride) {
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) FactoredRowsBlock<P, NB, MB>(a, n, m0, osx, ostride);
  for (; n < n1; ++n) FactoredRowsBlock<P, 1, MB>(a, n, m0, osx, ostride);
}

// The activations as the 4-bit kernels read them: the elements of block c times 2^{−8B}, B the
// block's position in its lane group (LaneGroupOf). Exact but for activations below 2^{−102},
// which become subnormal (an absolute error under 2^{−149} per product, nothing next to the f32
// rounding of the sums).
inline void ScaledActivations(const float* x, int64_t m, int64_t k, float* out) {
  const int64_t blocks = k / 32;
  for (int64_t c = 0; c < blocks; ++c) {
    int64_t first = 0;
    int g = 1;
    LaneGroupOf(c, blocks, &first, &g);
    const __m256 f = _mm256_set1_ps(std::ldexp(1.f, -8 * static_cast<int>(c - first)));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t at = i * k + 32 * c;
      for (int p = 0; p < 4; ++p) {
        _mm256_storeu_ps(out + at + 8 * p, _mm256_mul_ps(_mm256_loadu_ps(x + at + 8 * p), f));
      }
    }
  }
}

// All m rows of outputs [n_begin, n_end), in tiles of 32 weight rows as Gemv: blocks of 8
// activation rows (Q8_0 only), then 4, then 2, then 1, each against one weight row at a time.
template <PackedKind P>
void FactoredGemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.w.k;
  thread_local std::vector<float> offsets;
  thread_local std::vector<float> scaled;
  GemvArgs sa = a;
  int64_t ostride = 0;
  if constexpr (P != PackedKind::kQ8_0) {
    ostride = ((k / 32) * ScaleStride(P) + 7) & ~int64_t{7};
    offsets.resize(static_cast<size_t>(a.m * ostride));
    for (int64_t i = 0; i < a.m; ++i) OffsetSums<P>(a.x + i * k, k, offsets.data() + i * ostride);
    scaled.resize(static_cast<size_t>(a.m * k));
    ScaledActivations(a.x, a.m, k, scaled.data());
    sa.x = scaled.data();
  }
  constexpr int64_t kTile = 32;
  for (int64_t t = n_begin; t < n_end; t += kTile) {
    const int64_t te = t + kTile < n_end ? t + kTile : n_end;
    int64_t m0 = 0;
    if constexpr (P == PackedKind::kQ8_0) {
      // Q8_0 decodes a block with 4 widening loads and converts: shared by 8 activation rows
      // (8 accumulators, 4 quants, the scale and the running sum: 14 ymm registers, activations
      // as memory operands) it costs half as much per output as by 4 (hot m = 16: +5%).
      for (; m0 + 8 <= a.m; m0 += 8) {
        FactoredRowRange<P, 1, 8>(sa, t, te, m0, offsets.data() + m0 * ostride, ostride);
      }
    }
    for (; m0 + 4 <= a.m; m0 += 4) {
      FactoredRowRange<P, 1, 4>(sa, t, te, m0, offsets.data() + m0 * ostride, ostride);
    }
    if (a.m - m0 >= 2) {
      FactoredRowRange<P, 1, 2>(sa, t, te, m0, offsets.data() + m0 * ostride, ostride);
      m0 += 2;
    }
    if (a.m - m0 >= 1) {
      FactoredRowRange<P, 1, 1>(sa, t, te, m0, offsets.data() + m0 * ostride, ostride);
    }
  }
}

}  // namespace
}  // namespace tandem::quant::impl
