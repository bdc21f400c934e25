// AVX-512 (F, BW, VL + FMA, F16C) quantised GEMV kernels. Compiled with those flags only for this
// file; called only when the CPU has them (quant_gemv.cc).
#include <immintrin.h>

#include "model/cpu/quant_gemv_avx512_kquants.h"
#include "model/cpu/quant_gemv_impl.h"

namespace tandem::quant::internal {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  // 8 rows × 2 accumulators + 2 weight vectors + 1 activation: 19 of the 32 zmm registers.
  static constexpr int kMaxRows = 8;
  static constexpr int kBatchWeightRows = 2;
  static constexpr bool kLut = true;
  static V Iota16() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static V Iota16Minus8() {
    return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  }
  // out[0][i] = table[b[i] & 15]: vpermps reads only the low 4 bits of each index.
  static void Lut16(__m128i b, V table, V* out) {
    out[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(b), table);
  }
  // Packed 4-bit lane groups (quant_gemv.h): 16 lanes of g bytes as dwords.
  using IV = __m512i;
  static IV LoadLanes(const uint8_t* q, int g) {
    if (g == 4) return _mm512_loadu_si512(q);
    if (g == 2)
      return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  }
  template <int S>
  static IV Srl(IV v) {
    if constexpr (S == 0) {
      return v;
    } else {
      return _mm512_srli_epi32(v, S);
    }
  }
  static V Perm(IV idx, V table) { return _mm512_permutexvar_ps(idx, table); }
  // 32-entry table lookup (packed Q5, quant_gemv_q5.h): lo[idx & 15] where bit 4 of idx is
  // clear, else hi[idx & 15]; bits above 4 are ignored.
  static V Perm2(IV idx, V lo, V hi) { return _mm512_permutex2var_ps(lo, idx, hi); }
  // Block b of a group of g: out[0] = table[low nibbles of lane byte b], out[1] = high ones.
  static void LutLanes(const uint8_t* q, int g, int b, V table, V* out) {
    const IV v = LoadLanes(q, g);
    switch (b) {
      case 0:
        out[0] = Perm(v, table);
        out[1] = Perm(Srl<4>(v), table);
        return;
      case 1:
        out[0] = Perm(Srl<8>(v), table);
        out[1] = Perm(Srl<12>(v), table);
        return;
      case 2:
        out[0] = Perm(Srl<16>(v), table);
        out[1] = Perm(Srl<20>(v), table);
        return;
      default:
        out[0] = Perm(Srl<24>(v), table);
        out[1] = Perm(Srl<28>(v), table);
    }
  }
  static void U4Lanes(const uint8_t*, int, int, V*) {}  // kLut: never used
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float ReduceAdd(V v) { return _mm512_reduce_add_ps(v); }
  // out[j] = the sum of v[j]'s lanes, for N = 4 or 16 vectors at once: halves of vector pairs
  // are added across 256-, then 128-bit lanes (shuffle + add per pair), so the shuffles are
  // shared instead of ~4 per vector. N = 16 (8 activation rows × 2 weight rows) is the batched
  // kernel's block, N = 4 the single-row one's.
  template <int N>
  static void ReduceN(const V* v, float* out) {
    if constexpr (N == 4 || N == 16) {
      V u[N / 4];
#pragma GCC unroll 4
      for (int g = 0; g < N / 4; ++g) {
        const V* s = v + 4 * g;
        // [s0 lo256 + hi256 | s1 lo256 + hi256], the same for s2, s3.
        const V t01 = _mm512_add_ps(_mm512_shuffle_f32x4(s[0], s[1], 0x44),
                                    _mm512_shuffle_f32x4(s[0], s[1], 0xee));
        const V t23 = _mm512_add_ps(_mm512_shuffle_f32x4(s[2], s[3], 0x44),
                                    _mm512_shuffle_f32x4(s[2], s[3], 0xee));
        // 128-bit lane q: four partial sums of s[q].
        u[g] = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88),
                             _mm512_shuffle_f32x4(t01, t23, 0xdd));
      }
      if constexpr (N == 4) {
        V w = _mm512_add_ps(u[0], _mm512_permute_ps(u[0], 0x4e));
        w = _mm512_add_ps(w, _mm512_permute_ps(w, 0xb1));  // element 4q: the sum of v[q]
        const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, w)));
      } else {
        // Lane q of u[e] holds v[4e + q]'s partials: a 4×4 transpose-add per 128-bit lane
        // leaves element 4q + e = the sum of v[4e + q].
        const V a = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
        const V b = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
        const V c = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xee));
        const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_storeu_ps(out, _mm512_permutexvar_ps(idx, c));
      }
    } else {
      for (int j = 0; j < N; ++j) out[j] = ReduceAdd(v[j]);
    }
  }
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

// Q4_K, Q5_K and Q6_K rows take the sub-block-factored kernels (quant_gemv_avx512_kquants.h); the
// other types expand exact weights (quant_gemv_impl.h).
GemvFn Avx512Gemv(GgmlType type, bool packed) {
  if (!packed && type == GgmlType::kQ4_K) return &impl::KQuantGemv<impl::Q4KPairs>;
  if (!packed && type == GgmlType::kQ6_K) return &impl::KQuantGemv<impl::Q6KPairs>;
  if (!packed && type == GgmlType::kQ5_K) return &impl::KQuantGemv<impl::Q5KPairs>;
  return impl::Select<Avx512>(type, packed);
}
DequantFn Avx512Dequant(GgmlType type, bool packed) {
  return impl::SelectDequant<Avx512>(type, packed);
}

}  // namespace tandem::quant::internal
