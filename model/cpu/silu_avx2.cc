#include <immintrin.h>

#include "model/cpu/silu_simd.h"

namespace tandem::cpu {
namespace {

// e^x for 8 lanes, as silu_avx512.cc's Exp16: the same clamp, reduction and polynomial; 2^n is
// built in the exponent field (n in [−126, 127] after the clamp, always a normal number).
__m256 Exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.f)), _mm256_set1_ps(88.f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  const __m256i two_n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

__m256 SiluMul8(__m256 g, __m256 up) {
  const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e)), up);
}

}  // namespace

void SiluMulAvx2(const float* gate, const float* up, int64_t begin, int64_t end, float* out) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    _mm256_storeu_ps(out + i, SiluMul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < end) {  // the tail through the same lanes, padded
    alignas(32) float g[8] = {}, u[8] = {}, o[8];
    for (int64_t j = i; j < end; ++j) g[j - i] = gate[j], u[j - i] = up[j];
    _mm256_store_ps(o, SiluMul8(_mm256_load_ps(g), _mm256_load_ps(u)));
    for (int64_t j = i; j < end; ++j) out[j] = o[j - i];
  }
}

}  // namespace tandem::cpu
