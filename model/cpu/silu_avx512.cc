#include <immintrin.h>

#include "model/cpu/silu_simd.h"

namespace tandem::cpu {
namespace {

// e^x for 16 lanes: x = n·ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial
// (relative error < 2e-8 on that interval), scaled by 2^n. Inputs are clamped to the range where
// the f32 result is finite and normal, which is all SiLU needs.
__m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.f)), _mm512_set1_ps(88.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

__m512 SiluMul16(__m512 g, __m512 up) {
  const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.f), e)), up);
}

}  // namespace

void SiluMulAvx512(const float* gate, const float* up, int64_t begin, int64_t end, float* out) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    _mm512_storeu_ps(out + i, SiluMul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  }
  if (i < end) {  // the tail through the same lanes, masked
    const __mmask16 live = static_cast<__mmask16>((1u << (end - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(live, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(live, up + i);
    _mm512_mask_storeu_ps(out + i, live, SiluMul16(g, u));
  }
}

}  // namespace tandem::cpu
