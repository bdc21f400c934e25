// The lane sums of four 8-float vectors at once, for the instruction-set files of the panel
// kernel (quant_panel_gemm_avx2.cc, quant_panel_gemm_avx512.cc after halving its 16-float
// vectors): out[j] = ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7)) of v = in[j]'s lanes.
// Static: each file keeps its own copy, compiled with its own -m flags (a shared inline copy
// could reach the AVX2 path compiled for AVX-512).
#pragma once

#include <immintrin.h>

namespace tandem::quant::internal {

static inline void HaddReduce4(const __m256* in, float* out) {
  const __m256 ab = _mm256_hadd_ps(in[0], in[1]);  // [a01 a23 b01 b23 | a45 a67 b45 b67]
  const __m256 cd = _mm256_hadd_ps(in[2], in[3]);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // [a0123 b0123 c0123 d0123 | a4567 …]
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

}  // namespace tandem::quant::internal
