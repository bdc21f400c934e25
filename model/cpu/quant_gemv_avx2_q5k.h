// The AVX2 GEMV for Q5_K rows in the file's layout, with each 32-weight sub-block's scale and min
// factored out of its dot product: quant_gemv_avx2_q4k.h's kernel (its header states the
// arithmetic and the activations' order) with a fifth bit per quant. Included only by
// quant_gemv_avx2.cc, after quant_gemv_avx2_q4k.h (Q4KActivations, Q4KScales).
//
// Sub-block j's quants: the low (j even) or high (j odd) nibbles of the 32 bytes qs[32·(j/2) ..]
// and bit j of the 32 bytes qh[..], both loaded as 8 dwords (element l = 4i + b in byte b of
// dword i); the bit is shifted to bit 4 of its byte and OR-ed onto the nibble, so masking with
// 0x1F << 8b leaves q·2^{8b}, exact in f32, against the activations scaled by 2^{−8b}: each
// product is q·x bit for bit. A super-block's 8 sub-blocks are one partial sum
// (quant_gemv_avx2_fields.h). Results do not depend on the batch size.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "model/cpu/quant_gemv_avx2_fields.h"
#include "model/cpu/quant_gemv_avx2_q4k.h"
#include "model/cpu/quant_gemv_impl.h"

namespace tandem::quant::impl {
namespace {  // one copy, in quant_gemv_avx2.cc

constexpr int64_t kQ5KBytes = 176;

// Sub-block J's quants q in byte l % 4 of dword l / 4 (header): nib holds the 32 qs bytes of
// the sub-block pair, qh the 32 high-bit bytes.
template <int J>
[[gnu::always_inline]] inline __m256i Q5KSubBlock(__m256i nib, __m256i qh) {
  const __m256i low = J % 2 == 0 ? nib : _mm256_srli_epi32(nib, 4);
  __m256i top;  // bit J of each byte at bit 4 of the same byte (after the mask below)
  if constexpr (J < 4) {
    top = _mm256_slli_epi32(qh, 4 - J);
  } else if constexpr (J == 4) {
    top = qh;
  } else {
    top = _mm256_srli_epi32(qh, J - 4);
  }
  return _mm256_or_si256(_mm256_and_si256(low, _mm256_set1_epi8(0x0f)),
                         _mm256_and_si256(top, _mm256_set1_epi8(0x10)));
}

template <int MB, int J>
[[gnu::always_inline]] inline void Q5KSubBlockDots(__m256 (&part)[MB], const uint8_t* qs,
                                                   __m256i qh, const float* d1, const float* x,
                                                   int64_t k) {
  const __m256i nib = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (J / 2)));
  const __m256i v = Q5KSubBlock<J>(nib, qh);
  const __m256 q[4] = {_mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x1f))),
                       _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x1f << 8))),
                       _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x1f << 16))),
                       _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x1f << 24)))};
  FieldDots<MB>(J == 0, part, q, _mm256_broadcast_ss(d1 + J), x + 32 * J, k);
}

// Outputs of weight row n for activation rows [m0, m0 + MB) (x: the rows in Q4KActivations'
// order; sums: their 32-element sums, k / 32 floats per row).
template <int MB>
void Q5KRowsBlock(const GemvArgs& a, int64_t n, int64_t m0, const float* x, const float* sums) {
  const int64_t k = a.w.k, supers = k / 256, chunks = k / 32;
  const uint8_t* row = a.w.data + n * a.w.row_bytes;
  __m256 acc[MB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) acc[i] = _mm256_setzero_ps();
  const float* xm = x + m0 * k;
  const RowPrefetch prefetch(a.w.data, n, a.w.row_bytes, supers);
  for (int64_t s = 0; s < supers; ++s) {
    prefetch.Unit(s);
    const uint8_t* blk = row + s * kQ5KBytes;
    __m256 scales, mins;
    Q4KScales(blk, &scales, &mins);
    alignas(32) float d1[8];
    _mm256_store_ps(d1, scales);
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      acc[i] = _mm256_fnmadd_ps(mins, _mm256_loadu_ps(sums + (m0 + i) * chunks + 8 * s), acc[i]);
    }
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    const uint8_t* qs = blk + 48;
    const float* xs = xm + 256 * s;
    __m256 part[MB];
    Q5KSubBlockDots<MB, 0>(part, qs, qh, d1, xs, k);
    Q5KSubBlockDots<MB, 1>(part, qs, qh, d1, xs, k);
    Q5KSubBlockDots<MB, 2>(part, qs, qh, d1, xs, k);
    Q5KSubBlockDots<MB, 3>(part, qs, qh, d1, xs, k);
    Q5KSubBlockDots<MB, 4>(part, qs, qh, d1, xs, k);
    Q5KSubBlockDots<MB, 5>(part, qs, qh, d1, xs, k);
    Q5KSubBlockDots<MB, 6>(part, qs, qh, d1, xs, k);
    Q5KSubBlockDots<MB, 7>(part, qs, qh, d1, xs, k);
    AddParts<MB>(acc, part);
  }
  float v[1][MB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) v[0][i] = HorizontalSum(acc[i]);
  StoreResults<1, MB>(a, n, m0, v);
}

// All m rows of outputs [n_begin, n_end), in tiles of 32 weight rows: blocks of 8 activation
// rows, then 4, 2, 1, one weight row at a time.
inline void Q5KGemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.w.k;
  thread_local std::vector<float> x, sums;
  x.resize(static_cast<size_t>(a.m * k));
  sums.resize(static_cast<size_t>(a.m * (k / 32)));
  Q4KActivations(a.x, a.m, k, x.data(), sums.data());
  constexpr int64_t kTile = 32;
  for (int64_t t = n_begin; t < n_end; t += kTile) {
    const int64_t te = t + kTile < n_end ? t + kTile : n_end;
    int64_t m0 = 0;
    for (; m0 + 8 <= a.m; m0 += 8) {
      for (int64_t n = t; n < te; ++n) Q5KRowsBlock<8>(a, n, m0, x.data(), sums.data());
    }
    for (; m0 + 4 <= a.m; m0 += 4) {
      for (int64_t n = t; n < te; ++n) Q5KRowsBlock<4>(a, n, m0, x.data(), sums.data());
    }
    if (a.m - m0 >= 2) {
      for (int64_t n = t; n < te; ++n) Q5KRowsBlock<2>(a, n, m0, x.data(), sums.data());
      m0 += 2;
    }
    if (a.m - m0 >= 1) {
      for (int64_t n = t; n < te; ++n) Q5KRowsBlock<1>(a, n, m0, x.data(), sums.data());
    }
  }
}

}  // namespace
}  // namespace tandem::quant::impl
