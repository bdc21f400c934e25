// The AVX2 GEMV for Q4_K rows in the file's layout, with each 32-weight sub-block's scale and min
// factored out of its dot product, as quant_gemv_avx2_factored.h does for packed Q4_0/Q4_1.
// Included only by quant_gemv_avx2.cc, after that header (it reuses BlockDots, HorizontalSum).
//
// Sub-block j of a super-block has w = d1·q − m1 (d1 = d·scale_j, m1 = dmin·min_j, the f32
// products of model/format/dequant.cc), so Σ w·x = d1·Σ q·x − m1·Σ x. The kernel sums q·x per
// sub-block with exact f32 quants and four FMAs per 32 weights, adds d1·S, and subtracts the
// mins' part as one vector FMA per super-block: the 8 m1 against the 8 sub-block sums of x
// (computed once per call, shared by every weight row). Same real numbers as the exact-weight
// kernel, rounded in other places (the factored header's paragraph on arithmetic applies).
//
// Quants: the 32 bytes of a sub-block pair load as 8 dwords, dword i holding elements 4i..4i+3
// of the pair's first sub-block in its low nibbles (bits 8b..8b+3 for element 4i + b) and of
// the second in its high nibbles. Masking with 0xF << 8b leaves q·2^{8b} for elements 4i + b,
// i = 0..7 — exact in f32 — so the activations are copied once per call in that order and
// scaled by 2^{−8b} (Q4KActivations): position 8b + i of each 32-chunk holds x[4i + b]·2^{−8b},
// and (q·2^{8b})·(x·2^{−8b}) is q·x bit for bit. Per 8 weights: an AND, a convert and an FMA,
// against a widen, a convert, a multiply, a subtract and an FMA for the exact weights.
// Each output's operations depend only on its own weight row and activation row, so results do
// not depend on the batch size.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/cpu/quant_gemv_avx2_factored.h"
#include "model/cpu/quant_gemv_impl.h"

namespace tandem::quant::impl {
namespace {  // one copy, in quant_gemv_avx2.cc

constexpr int64_t kQ4KBytes = 144;

// x [m][k] in the kernel's order (header) into out [m][k], and each 32-chunk's sum into sums
// [m][k / 32].
inline void Q4KActivations(const float* x, int64_t m, int64_t k, float* out, float* sums) {
  const int64_t chunks = k / 32;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < chunks; ++c) {
      const float* src = x + i * k + 32 * c;
      float* dst = out + i * k + 32 * c;
      for (int b = 0; b < 4; ++b) {
        const float f = std::ldexp(1.f, -8 * b);
        for (int t = 0; t < 8; ++t) dst[8 * b + t] = src[4 * t + b] * f;
      }
      const __m256 s =
          _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8)),
                        _mm256_add_ps(_mm256_loadu_ps(src + 16), _mm256_loadu_ps(src + 24)));
      sums[i * chunks + c] = HorizontalSum(s);
    }
  }
}

// A super-block's 8 sub-block scales d·scale_j and mins dmin·min_j (dequant.cc's products), the
// 6-bit fields unpacked for all 8 at once: bytes 0..3 hold scale_j (j < 4) in their low 6 bits,
// bytes 4..7 min_j; sub-blocks 4..7 take their low 4 bits from bytes 8..11 (scale: low nibble,
// min: high nibble) and their high 2 bits from the top of bytes 0..3 (scale) and 4..7 (min).
[[gnu::always_inline]] inline void Q4KScales(const uint8_t* blk, __m256* scales, __m256* mins) {
  uint32_t u[3];
  std::memcpy(u, blk + 4, sizeof u);
  const uint64_t sc = (u[0] & 0x3f3f3f3fu) |
                      uint64_t{(u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4)} << 32;
  const uint64_t mn = (u[1] & 0x3f3f3f3fu) |
                      uint64_t{((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4)}
                          << 32;
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(LoadU16(blk)));
  const __m256 dmin = _mm256_set1_ps(_cvtsh_ss(LoadU16(blk + 2)));
  *scales = _mm256_mul_ps(
      d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(sc)))));
  *mins = _mm256_mul_ps(
      dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn)))));
}

// Outputs of weight rows [n, n + NB) for activation rows [m0, m0 + MB) (x: the rows in the
// kernel's order; sums: their chunk sums, k / 32 floats per row).
template <int NB, int MB>
void Q4KRowsBlock(const GemvArgs& a, int64_t n, int64_t m0, const float* x, const float* sums) {
  const int64_t k = a.w.k, supers = k / 256, chunks = k / 32;
  const uint8_t* rows[NB];
  __m256 acc[NB][MB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
    rows[r] = a.w.data + (n + r) * a.w.row_bytes;
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  const int64_t ahead = std::max<int64_t>(2 * NB, (2048 + a.w.row_bytes - 1) / a.w.row_bytes);
  const char* prefetch = reinterpret_cast<const char*>(a.w.data + (n + ahead) * a.w.row_bytes);
  const int64_t step = (NB * a.w.row_bytes + supers - 1) / (supers > 0 ? supers : 1);
  for (int64_t s = 0; s < supers; ++s) {
    for (int64_t o = s * step; o < (s + 1) * step; o += 64) _mm_prefetch(prefetch + o, _MM_HINT_T0);
    alignas(32) float d1[NB][8];
#pragma GCC unroll 16
    for (int r = 0; r < NB; ++r) {
      const uint8_t* blk = rows[r] + s * kQ4KBytes;
      __m256 scales, mins;
      Q4KScales(blk, &scales, &mins);
      _mm256_store_ps(d1[r], scales);
#pragma GCC unroll 16
      for (int i = 0; i < MB; ++i) {
        acc[r][i] =
            _mm256_fnmadd_ps(mins, _mm256_loadu_ps(sums + (m0 + i) * chunks + 8 * s), acc[r][i]);
      }
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      __m256i lo[NB], hi[NB];
#pragma GCC unroll 16
      for (int r = 0; r < NB; ++r) {
        lo[r] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(rows[r] + s * kQ4KBytes + 16 + 32 * p));
        hi[r] = _mm256_srli_epi32(lo[r], 4);
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256 q[NB][4], d[NB];
#pragma GCC unroll 16
        for (int r = 0; r < NB; ++r) {
          const __m256i v = h == 0 ? lo[r] : hi[r];
#pragma GCC unroll 4
          for (int b = 0; b < 4; ++b) {
            q[r][b] = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x0f << (8 * b))));
          }
          d[r] = _mm256_broadcast_ss(&d1[r][2 * p + h]);
        }
        BlockDots<NB, MB>(acc, q, d, x + m0 * k, k, 8 * s + 2 * p + h);
      }
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

template <int MB>
void Q4KRowRange(const GemvArgs& a, int64_t n0, int64_t n1, int64_t m0, const float* x,
                 const float* sums) {
  for (int64_t n = n0; n < n1; ++n) Q4KRowsBlock<1, MB>(a, n, m0, x, sums);
}

// All m rows of outputs [n_begin, n_end), in tiles of 32 weight rows: blocks of 4 activation
// rows, then 2, then 1, one weight row at a time (as FactoredGemv).
inline void Q4KGemv(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.w.k;
  thread_local std::vector<float> x, sums;
  x.resize(static_cast<size_t>(a.m * k));
  sums.resize(static_cast<size_t>(a.m * (k / 32)));
  Q4KActivations(a.x, a.m, k, x.data(), sums.data());
  constexpr int64_t kTile = 32;
  for (int64_t t = n_begin; t < n_end; t += kTile) {
    const int64_t te = t + kTile < n_end ? t + kTile : n_end;
    int64_t m0 = 0;
    for (; m0 + 4 <= a.m; m0 += 4) Q4KRowRange<4>(a, t, te, m0, x.data(), sums.data());
    if (a.m - m0 >= 2) {
      Q4KRowRange<2>(a, t, te, m0, x.data(), sums.data());
      m0 += 2;
    }
    if (a.m - m0 >= 1) Q4KRowRange<1>(a, t, te, m0, x.data(), sums.data());
  }
}

}  // namespace
}  // namespace tandem::quant::impl
