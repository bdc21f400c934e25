// The AVX2 path's DequantRows for packed Q4_0 and Q4_1 rows (quant_gemv.h PackRows): the panel
// kernels' (quant_panel_gemm.h) and the large-batch tiles' weights, dequant.cc's values exactly.
// Included only by quant_gemv_avx2.cc.
//
// A whole lane group at a time: its 16 lanes are loaded once as dwords (block b of the group in
// bits 8b..8b+7, quant_gemv.h) and shifted right by 4 once for the high nibbles; each block's
// quants are then masked in place, 0xF << 8b, as the factored kernel does
// (quant_gemv_avx2_factored.h), giving Q = q·2^{8b} exactly in f32 — and the block scale is
// taken as d' = d·2^{−8b} instead. d' is exact (d is an f16 value, at least 2^{−24} in magnitude
// unless zero; 2^{−48} is far from f32's subnormals), and d'·Q is the same real number as d·q, so
// it rounds to the same f32: Q4_1's d'·Q + m and Q4_0's d'·(Q − 8·2^{8b}) (an exact integer
// subtraction) are dequant.cc's d·q + m and d·(q − 8) bit for bit. Per 8 weights: an AND, a
// convert, a multiply, an add (or integer subtract) and a store — the generic decoder
// (quant_gemv_impl.h PackedQ4 without a table) reloads and variable-shifts the group for every
// block as well.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "model/cpu/quant_gemv.h"
#include "model/cpu/quant_gemv_avx2_factored.h"

namespace tandem::quant::impl {
namespace {  // one copy, in quant_gemv_avx2.cc

// Blocks first .. first + G − 1 of a packed row (sc: the row's scales) into dst (32·G floats).
template <PackedKind P, int G>
[[gnu::always_inline]] inline void DequantLaneGroup(const uint8_t* qs, const float* sc,
                                                    int64_t first, float* dst) {
  __m256i lo[2];
  LoadLaneDwords<G>(qs + 16 * first, lo);
  const __m256i hi[2] = {_mm256_srli_epi32(lo[0], 4), _mm256_srli_epi32(lo[1], 4)};
  // Elements 0..7, 8..15 (low nibbles of lanes 0..7, 8..15), then 16..23, 24..31 (high ones).
  const __m256i* const parts[4] = {&lo[0], &lo[1], &hi[0], &hi[1]};
#pragma GCC unroll 4
  for (int b = 0; b < G; ++b) {
    const int64_t c = first + b;
    const __m256i mask = _mm256_set1_epi32(0x0f << (8 * b));
    const float unscale = 1.f / static_cast<float>(1 << (8 * b));  // 2^{−8b}, exact
    const __m256 d = _mm256_set1_ps(sc[ScaleStride(P) * c] * unscale);
    float* out = dst + 32 * b;
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      __m256i q = _mm256_and_si256(*parts[p], mask);
      if constexpr (P == PackedKind::kQ4_0) {
        q = _mm256_sub_epi32(q, _mm256_set1_epi32(8 << (8 * b)));  // (q − 8)·2^{8b}
        _mm256_storeu_ps(out + 8 * p, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
      } else {
        const __m256 m = _mm256_set1_ps(sc[2 * c + 1]);
        _mm256_storeu_ps(out + 8 * p, _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(q)), m));
      }
    }
  }
}

// Rows [n0, n1) of a packed Q4_0 or Q4_1 matrix as f32 into out ([n1 − n0][k]).
template <PackedKind P>
void PackedQ4DequantRows(const QuantMatrix& w, int64_t n0, int64_t n1, float* out) {
  const int64_t k = w.k, blocks = k / 32, full = blocks & ~int64_t{3};
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.data + n * w.row_bytes;
    const float* sc = reinterpret_cast<const float*>(row + blocks * QuantBytes(P));
    float* dst = out + (n - n0) * k;
    int64_t c = 0;
    for (; c < full; c += 4) DequantLaneGroup<P, 4>(row, sc, c, dst + 32 * c);
    if ((blocks & 2) != 0) {
      DequantLaneGroup<P, 2>(row, sc, c, dst + 32 * c);
      c += 2;
    }
    if ((blocks & 1) != 0) DequantLaneGroup<P, 1>(row, sc, c, dst + 32 * c);
  }
}

}  // namespace
}  // namespace tandem::quant::impl
