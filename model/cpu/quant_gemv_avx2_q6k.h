// The AVX2 GEMV for Q6_K rows in the file's layout, with each 16-weight sub-block's scale
// factored out of its dot product. Included only by quant_gemv_avx2.cc, after
// quant_gemv_avx2_q4k.h (it reads the activations in that kernel's order, Q4KActivations).
//
// Sub-block t of a super-block has w = D_t·(q − 32), D_t = d·S_t (dequant.cc's d·(S·q): an f16
// times an int8 is exact in f32, so D_t·(q − 32) is the same real number), q the unsigned 6-bit
// quant. So Σ w·x = Σ_t D_t·Σ q·x − Σ_t 32·D_t·Σ x: the quants' part with exact f32 quants,
// the offsets' part as two vector FMAs per super-block (the 16 32·D_t against the 16 sub-block
// sums of x, computed once per call and shared by every weight row).
//
// Quants: for half h and quarter j of a super-block (elements 128h + 32j + l, l = 0..31), the
// 32 low-nibble bytes ql[64h + 32·(j & 1) + l] (nibble j / 2) and the 32 high-bit bytes
// qh[32h + l] (bits 2j, 2j + 1) load as 8 dwords each; three vector ops per quarter put q in
// byte l % 4 of dword l / 4, so masking with 0x3F << 8b leaves q·2^{8b} for elements l = 4i + b,
// exact in f32, against Q4KActivations' order (position 8b + i of each 32-chunk holds
// x[4i + b]·2^{−8b}): each product is q·x bit for bit. Dwords 0..3 are sub-block 2j, 4..7
// sub-block 2j + 1 of the half, so the scale is a vector of two D_t. A super-block's 8 quarters
// are one partial sum (quant_gemv_avx2_fields.h). Results do not depend on the batch size.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "model/cpu/quant_gemv_avx2_fields.h"
#include "model/cpu/quant_gemv_avx2_q4k.h"  // Q4KActivations
#include "model/cpu/quant_gemv_impl.h"

namespace tandem::quant::impl {
namespace {  // one copy, in quant_gemv_avx2.cc

constexpr int64_t kQ6KBytes = 210;

// The 16-element sums of x [m][k] into sums [m][k / 16].
inline void SubBlockSums16(const float* x, int64_t m, int64_t k, float* sums) {
  for (int64_t i = 0; i < m * k / 16; ++i) {
    sums[i] =
        HorizontalSum(_mm256_add_ps(_mm256_loadu_ps(x + 16 * i), _mm256_loadu_ps(x + 16 * i + 8)));
  }
}

// Quarter j (0..3) of a half's quants: q in byte l % 4 of dword l / 4 (header).
template <int J>
[[gnu::always_inline]] inline __m256i Q6KQuarter(__m256i l0, __m256i l1, __m256i h) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), high2 = _mm256_set1_epi8(0x30);
  const __m256i l = J % 2 == 0 ? l0 : l1;
  const __m256i nib =
      J < 2 ? _mm256_and_si256(l, low4) : _mm256_and_si256(_mm256_srli_epi32(l, 4), low4);
  __m256i top;  // bits 2J, 2J + 1 of each qh byte at bits 4, 5 (16-bit shifts stay in the byte
                // once masked)
  if constexpr (J == 0) {
    top = _mm256_slli_epi32(h, 4);
  } else if constexpr (J == 1) {
    top = _mm256_slli_epi32(h, 2);
  } else if constexpr (J == 2) {
    top = h;
  } else {
    top = _mm256_srli_epi32(h, 2);
  }
  return _mm256_or_si256(nib, _mm256_and_si256(top, high2));
}

template <int MB, int J>
[[gnu::always_inline]] inline void Q6KQuarterDots(__m256 (&part)[MB], __m256i l0, __m256i l1,
                                                  __m256i h, __m256 dh, const float* x, int64_t k) {
  const __m256i v = Q6KQuarter<J>(l0, l1, h);
  const __m256 q[4] = {_mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x3f))),
                       _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x3f << 8))),
                       _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x3f << 16))),
                       _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x3f << 24)))};
  // D of sub-blocks 2J (dwords 0..3) and 2J + 1 (4..7) of the half.
  const __m256i pick =
      _mm256_setr_epi32(2 * J, 2 * J, 2 * J, 2 * J, 2 * J + 1, 2 * J + 1, 2 * J + 1, 2 * J + 1);
  FieldDots<MB>(false, part, q, _mm256_permutevar8x32_ps(dh, pick), x + 32 * J, k);
}

// Outputs of weight row n for activation rows [m0, m0 + MB) (x: the rows in Q4KActivations'
// order; sums: their 16-element sums, k / 16 floats per row).
template <int MB>
void Q6KRowsBlock(const GemvArgs& a, int64_t n, int64_t m0, const float* x, const float* sums) {
  const int64_t k = a.w.k, supers = k / 256;
  const uint8_t* row = a.w.data + n * a.w.row_bytes;
  __m256 acc[MB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) acc[i] = _mm256_setzero_ps();
  const float* xm = x + m0 * k;
  const RowPrefetch prefetch(a.w.data, n, a.w.row_bytes, supers);
  for (int64_t s = 0; s < supers; ++s) {
    prefetch.Unit(s);
    const uint8_t* blk = row + s * kQ6KBytes;
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(LoadU16(blk + 208)));
    __m256 dh[2];  // D_t of sub-blocks 8h .. 8h + 7
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      dh[h] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                   reinterpret_cast<const __m128i*>(blk + 192 + 8 * h)))));
    }
    const __m256 thirty_two = _mm256_set1_ps(32.f);
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) {
      const float* si = sums + (m0 + i) * (k / 16) + 16 * s;
      acc[i] = _mm256_fnmadd_ps(_mm256_mul_ps(thirty_two, dh[0]), _mm256_loadu_ps(si), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_mul_ps(thirty_two, dh[1]), _mm256_loadu_ps(si + 8), acc[i]);
    }
    __m256 part[MB];
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) part[i] = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      const float* xh = xm + 256 * s + 128 * h;
      Q6KQuarterDots<MB, 0>(part, l0, l1, hb, dh[h], xh, k);
      Q6KQuarterDots<MB, 1>(part, l0, l1, hb, dh[h], xh, k);
      Q6KQuarterDots<MB, 2>(part, l0, l1, hb, dh[h], xh, k);
      Q6KQuarterDots<MB, 3>(part, l0, l1, hb, dh[h], xh, k);
    }
    AddParts<MB>(acc, part);
  }
  float v[1][MB];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) v[0][i] = HorizontalSum(acc[i]);
  StoreResults<1, MB>(a, n, m0, v);
}

// All m rows of outputs [n_begin, n_end), in tiles of 32 weight rows: blocks of 8 activation
// rows, then 4, 2, 1, one weight row at a time.
inline void Q6KGemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.w.k;
  thread_local std::vector<float> x, sums32, sums16;
  x.resize(static_cast<size_t>(a.m * k));
  sums32.resize(static_cast<size_t>(a.m * (k / 32)));
  sums16.resize(static_cast<size_t>(a.m * (k / 16)));
  Q4KActivations(a.x, a.m, k, x.data(), sums32.data());
  SubBlockSums16(a.x, a.m, k, sums16.data());
  constexpr int64_t kTile = 32;
  for (int64_t t = n_begin; t < n_end; t += kTile) {
    const int64_t te = t + kTile < n_end ? t + kTile : n_end;
    int64_t m0 = 0;
    for (; m0 + 8 <= a.m; m0 += 8) {
      for (int64_t n = t; n < te; ++n) Q6KRowsBlock<8>(a, n, m0, x.data(), sums16.data());
    }
    for (; m0 + 4 <= a.m; m0 += 4) {
      for (int64_t n = t; n < te; ++n) Q6KRowsBlock<4>(a, n, m0, x.data(), sums16.data());
    }
    if (a.m - m0 >= 2) {
      for (int64_t n = t; n < te; ++n) Q6KRowsBlock<2>(a, n, m0, x.data(), sums16.data());
      m0 += 2;
    }
    if (a.m - m0 >= 1) {
      for (int64_t n = t; n < te; ++n) Q6KRowsBlock<1>(a, n, m0, x.data(), sums16.data());
    }
  }
}

}  // namespace
}  // namespace tandem::quant::impl
