// AVX2 (+ FMA, F16C) quantised GEMV kernels. Compiled with those flags only for this file; called
// only when the CPU has them (quant_gemv.cc).
#include <immintrin.h>

#include "model/cpu/quant_gemv_avx2_dequant_q4.h"
#include "model/cpu/quant_gemv_avx2_factored.h"
#include "model/cpu/quant_gemv_avx2_q4k.h"
#include "model/cpu/quant_gemv_avx2_q5.h"
#include "model/cpu/quant_gemv_avx2_q5k.h"
#include "model/cpu/quant_gemv_avx2_q6k.h"
#include "model/cpu/quant_gemv_impl.h"

namespace tandem::quant::internal {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;
  // Batched: 1 weight row (4 decoded vectors) × 8 activation rows (8 accumulators) + 1
  // activation vector: 13 of the 16 ymm registers. Each weight chunk is decoded once per 8
  // activation rows (2 × 2 decoded it every 2 and ran at ~55% of this speed at m = 16).
  static constexpr int kMaxRows = 8;
  static constexpr int kBatchWeightRows = 1;
  static constexpr bool kLut = false;  // an 8-entry permute would need two and a blend
  static V Iota16() { return Zero(); }
  static V Iota16Minus8() { return Zero(); }
  static void Lut16(__m128i, V, V*) {}
  using IV = __m256i;
  static IV LoadLanes(const uint8_t*, int) { return _mm256_setzero_si256(); }  // kLut only
  template <int S>
  static IV Srl(IV v) {
    return v;
  }
  static V Perm(IV, V table) { return table; }
  static void LutLanes(const uint8_t*, int, int, V, V*) {}
  // Block b of a packed 4-bit lane group of g (quant_gemv.h) as 32 nibble values in f32:
  // out[0..1] the low nibbles of lane byte b (elements 0..15), out[2..3] the high ones.
  static void U4Lanes(const uint8_t* q, int g, int b, V* out) {
    for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7
      __m256i v;
      if (g == 4) {
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * h));
      } else if (g == 2) {
        v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h)));
      } else {
        v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * h)));
      }
      v = _mm256_srlv_epi32(v, _mm256_set1_epi32(8 * b));
      const __m256i mask = _mm256_set1_epi32(0x0f);
      out[h] = _mm256_cvtepi32_ps(_mm256_and_si256(v, mask));
      out[2 + h] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 4), mask));
    }
  }
  // Field f (0..5) of a packed Q5 lane group's 16 lanes (quant_pack_q5.h) as f32: out[0] lanes
  // 0..7, out[1] lanes 8..15.
  static void U5Field(const uint8_t* q, int f, V* out) {
    const __m128i shift = _mm_cvtsi32_si128(5 * f);
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * h));
      out[h] =
          _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(v, shift), _mm256_set1_epi32(31)));
    }
  }
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float ReduceAdd(V v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
  template <int N>
  static void ReduceN(const V* v, float* out) {
    for (int j = 0; j < N; ++j) out[j] = ReduceAdd(v[j]);
  }
  static float F16ToF32(uint16_t h) { return _cvtsh_ss(h); }
  static void U8x16(__m128i b, V* out) {
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
  }
  static void I8x16(__m128i b, V* out) {
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
  }
  static void F16x16(const uint8_t* p, V* out) {
    out[0] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    out[1] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  }
  static void Bf16x16(const uint8_t* p, V* out) {
    for (int h = 0; h < 2; ++h) {
      const __m256i u =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
      out[h] = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    }
  }
};

}  // namespace

// Packed Q4_0/Q4_1/Q8_0 rows take the block-factored kernel (quant_gemv_avx2_factored.h), packed
// Q5_0/Q5_1 rows theirs (quant_gemv_avx2_q5.h), Q4_K, Q5_K and Q6_K rows the sub-block-factored
// ones (quant_gemv_avx2_q4k.h, _q5k.h, _q6k.h); F16, BF16 and unpacked rows expand exact weights
// (quant_gemv_impl.h).
GemvFn Avx2Gemv(GgmlType type, bool packed) {
  if (!packed && type == GgmlType::kQ4_K) return &impl::Q4KGemv;
  if (!packed && type == GgmlType::kQ6_K) return &impl::Q6KGemv;
  if (!packed && type == GgmlType::kQ5_K) return &impl::Q5KGemv;
  if (packed) {
    switch (type) {
      case GgmlType::kQ8_0:
        return &impl::FactoredGemv<impl::PackedKind::kQ8_0>;
      case GgmlType::kQ4_0:
        return &impl::FactoredGemv<impl::PackedKind::kQ4_0>;
      case GgmlType::kQ4_1:
        return &impl::FactoredGemv<impl::PackedKind::kQ4_1>;
      case GgmlType::kQ5_0:
        return &impl::Q5Gemv<1>;
      case GgmlType::kQ5_1:
        return &impl::Q5Gemv<2>;
      default:
        break;
    }
  }
  return impl::Select<Avx2>(type, packed);
}
// Packed Q4_0/Q4_1 rows dequantise a lane group at a time (quant_gemv_avx2_dequant_q4.h).
DequantFn Avx2Dequant(GgmlType type, bool packed) {
  if (packed && type == GgmlType::kQ4_0) return &impl::PackedQ4DequantRows<impl::PackedKind::kQ4_0>;
  if (packed && type == GgmlType::kQ4_1) return &impl::PackedQ4DequantRows<impl::PackedKind::kQ4_1>;
  return impl::SelectDequant<Avx2>(type, packed);
}

}  // namespace tandem::quant::internal
