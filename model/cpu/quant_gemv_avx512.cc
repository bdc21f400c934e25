// AVX-512 (F, BW, VL + FMA, F16C) quantised GEMV kernels. Compiled with those flags only for this
// file; called only when the CPU has them (quant_gemv.cc).
#include <immintrin.h>

#include "model/cpu/quant_gemv_impl.h"

namespace tandem::quant::internal {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  // 8 rows × 2 accumulators + 2 weight vectors + 1 activation: 19 of the 32 zmm registers.
  static constexpr int kMaxRows = 8;
  static constexpr bool kLut = true;
  static V Iota16() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static V Iota16Minus8() {
    return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  }
  // out[0][i] = table[b[i] & 15]: vpermps reads only the low 4 bits of each index.
  static void Lut16(__m128i b, V table, V* out) {
    out[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(b), table);
  }
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float ReduceAdd(V v) { return _mm512_reduce_add_ps(v); }
  static float F16ToF32(uint16_t h) { return _cvtsh_ss(h); }
  static void U8x16(__m128i b, V* out) { out[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); }
  static void I8x16(__m128i b, V* out) { out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }
  static void F16x16(const uint8_t* p, V* out) {
    out[0] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void Bf16x16(const uint8_t* p, V* out) {
    const __m512i u =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    out[0] = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
};

}  // namespace

GemvFn Avx512Gemv(GgmlType type, bool packed) { return impl::Select<Avx512>(type, packed); }
DequantFn Avx512Dequant(GgmlType type, bool packed) {
  return impl::SelectDequant<Avx512>(type, packed);
}

}  // namespace tandem::quant::internal
