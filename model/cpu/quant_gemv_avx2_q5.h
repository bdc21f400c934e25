// The AVX2 GEMV for packed Q5_0 and Q5_1 rows (quant_pack_q5.h), with each block's scale factored
// out of its dot product. Included only by quant_gemv_avx2.cc.
//
// A block's weights are w = d·q + o (Q5_0: o = −16·d, dequant.cc's d·(q − 16); Q5_1: o = m), so
//   Σ w·x = d·Σ q·x + o·Σ x.
// Field f of a group's lanes masked in place (AND with 31 << 5f) is q·2^{5f}, exact in f32; the
// activations are copied once per call with element e of each group (96 elements) scaled by
// 2^{−5·⌊e/16⌋} (Q5ScaledActivations), so each product is q·x bit for bit: per 8 weights one
// AND, one convert and one FMA. A group's three blocks are one partial sum
// (quant_gemv_avx2_fields.h). The offsets' part is one dot product per row of its scale array
// with per-block sums of x (Q5_0: −16·Σx; Q5_1: (0, Σx) beside each (d, m)), computed once per
// call and shared by every weight row.
//
// Arithmetic: the same real numbers as the exact-weight kernels, rounded in other places
// (quant_gemv_avx2_factored.h's paragraph applies; quant_linear_test bounds every path by
// 1e-5·Σ|w·x|). Results do not depend on the batch size.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/cpu/quant_gemv_avx2_factored.h"  // HorizontalSum
#include "model/cpu/quant_gemv_avx2_fields.h"
#include "model/cpu/quant_gemv_impl.h"
#include "model/cpu/quant_pack_q5.h"

namespace tandem::quant::impl {
namespace {  // one copy, in quant_gemv_avx2.cc

// The offsets' multipliers of one activation row x [k] for S scales per block (1: Q5_0, 2:
// Q5_1), zero-padded to `len` (a multiple of 8).
template <int S>
void Q5OffsetSums(const float* x, int64_t k, float* out, int64_t len) {
  const int64_t blocks = k / 32;
  for (int64_t c = 0; c < blocks; ++c) {
    const float* xc = x + 32 * c;
    const float sum = HorizontalSum(
        _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xc), _mm256_loadu_ps(xc + 8)),
                      _mm256_add_ps(_mm256_loadu_ps(xc + 16), _mm256_loadu_ps(xc + 24))));
    if constexpr (S == 1) {
      out[c] = -16.f * sum;
    } else {
      out[2 * c] = 0.f;
      out[2 * c + 1] = sum;
    }
  }
  for (int64_t j = blocks * S; j < len; ++j) out[j] = 0.f;
}

// x [m][k] with element e of each 96-element group times 2^{−5·⌊e/16⌋} into out [m][k]. Exact
// but for activations below 2^{−100}, which become subnormal (an absolute error under 2^{−149}
// per product).
inline void Q5ScaledActivations(const float* x, int64_t m, int64_t k, float* out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t e = 0; e < k; e += 16) {
      const int f = static_cast<int>((e / 16) % (2 * kQ5GroupBlocks));
      const __m256 s = _mm256_set1_ps(std::ldexp(1.f, -5 * f));
      const int64_t at = i * k + e;
      _mm256_storeu_ps(out + at, _mm256_mul_ps(_mm256_loadu_ps(x + at), s));
      _mm256_storeu_ps(out + at + 8, _mm256_mul_ps(_mm256_loadu_ps(x + at + 8), s));
    }
  }
}

// The `blocks` (1..3) blocks of the group at chunk c0 of one weight row (lanes: its 16 lanes
// as two vectors; sc: the first block's scales) into acc, as one partial sum.
template <int S, int MB, int kBlocks>
[[gnu::always_inline]] inline void Q5Group(__m256 (&acc)[MB], const __m256i (&lanes)[2],
                                           const float* sc, const float* x, int64_t k, int64_t c0) {
  __m256 part[MB];
#pragma GCC unroll 3
  for (int b = 0; b < kBlocks; ++b) {
    const __m256i lo = _mm256_set1_epi32(31 << (10 * b)),
                  hi = _mm256_set1_epi32(31 << (10 * b + 5));
    const __m256 q[4] = {_mm256_cvtepi32_ps(_mm256_and_si256(lanes[0], lo)),   // elements 0..7
                         _mm256_cvtepi32_ps(_mm256_and_si256(lanes[1], lo)),   // 8..15
                         _mm256_cvtepi32_ps(_mm256_and_si256(lanes[0], hi)),   // 16..23
                         _mm256_cvtepi32_ps(_mm256_and_si256(lanes[1], hi))};  // 24..31
    FieldDots<MB>(b == 0, part, q, _mm256_broadcast_ss(sc + S * b), x + 32 * (c0 + b), k);
  }
  AddParts<MB>(acc, part);
}

// Outputs of weight row n for activation rows [m0, m0 + MB) (x: their scaled copy; osx: their
// offset multipliers, ostride floats apart).
template <int S, int MB>
void Q5RowsBlock(const GemvArgs& a, int64_t n, int64_t m0, const float* x, const float* osx,
                 int64_t ostride) {
  const int64_t k = a.w.k, blocks = k / 32, groups = Q5Groups(blocks);
  const uint8_t* row = a.w.data + n * a.w.row_bytes;
  const float* sc = reinterpret_cast<const float*>(row + groups * kQ5GroupBytes);
  __m256 acc[MB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
    acc[i] = MaskedDot(sc, osx + (m0 + i) * ostride, blocks * S, _mm256_setzero_ps());
  }
  const float* xm = x + m0 * k;
  const RowPrefetch prefetch(a.w.data, n, a.w.row_bytes, groups);
  const int64_t full = blocks / kQ5GroupBlocks;
  for (int64_t g = 0; g < groups; ++g) {
    prefetch.Unit(g);
    const uint8_t* q = row + g * kQ5GroupBytes;
    const __m256i lanes[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32))};
    const int64_t c0 = g * kQ5GroupBlocks;
    if (g < full) {
      Q5Group<S, MB, 3>(acc, lanes, sc + S * c0, xm, k, c0);
    } else if (blocks - c0 == 2) {
      Q5Group<S, MB, 2>(acc, lanes, sc + S * c0, xm, k, c0);
    } else {
      Q5Group<S, MB, 1>(acc, lanes, sc + S * c0, xm, k, c0);
    }
  }
  float v[1][MB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) v[0][i] = HorizontalSum(acc[i]);
  StoreResults<1, MB>(a, n, m0, v);
}

// All m rows of outputs [n_begin, n_end), in tiles of 32 weight rows: blocks of 8 activation
// rows, then 4, 2, 1, one weight row at a time (8 rather than 4 rows per decoded group: hot
// 1536×576 Q5_0 at m = 16, one thread, 2.10–2.18 -> 2.31–2.36 G weights/s).
template <int S>
void Q5Gemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.w.k;
  const int64_t ostride = ((k / 32) * S + 7) & ~int64_t{7};
  thread_local std::vector<float> offsets, scaled;
  offsets.resize(static_cast<size_t>(a.m * ostride));
  for (int64_t i = 0; i < a.m; ++i) {
    Q5OffsetSums<S>(a.x + i * k, k, offsets.data() + i * ostride, ostride);
  }
  scaled.resize(static_cast<size_t>(a.m * k));
  Q5ScaledActivations(a.x, a.m, k, scaled.data());
  const float* x = scaled.data();
  const float* osx = offsets.data();
  constexpr int64_t kTile = 32;
  for (int64_t t = n_begin; t < n_end; t += kTile) {
    const int64_t te = t + kTile < n_end ? t + kTile : n_end;
    int64_t m0 = 0;
    for (; m0 + 8 <= a.m; m0 += 8) {
      for (int64_t n = t; n < te; ++n) Q5RowsBlock<S, 8>(a, n, m0, x, osx, ostride);
    }
    for (; m0 + 4 <= a.m; m0 += 4) {
      for (int64_t n = t; n < te; ++n) Q5RowsBlock<S, 4>(a, n, m0, x, osx, ostride);
    }
    if (a.m - m0 >= 2) {
      for (int64_t n = t; n < te; ++n) Q5RowsBlock<S, 2>(a, n, m0, x, osx, ostride);
      m0 += 2;
    }
    if (a.m - m0 >= 1) {
      for (int64_t n = t; n < te; ++n) Q5RowsBlock<S, 1>(a, n, m0, x, osx, ostride);
    }
  }
}

}  // namespace
}  // namespace tandem::quant::impl
