// AVX-512 (F, BW, VL + FMA, F16C) attention kernels. Compiled with those flags only for this
// file; called only when the CPU has them (SelectKernels).
#include <immintrin.h>

#include "attention/cpu/attention_kernel.h"
#include "attention/cpu/attention_tile_query_lanes.h"

namespace tandem::attention_cpu {
namespace {

struct Avx512Traits {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kQueryBlock = 4;
  // 4 queries × 4 tokens = 16 accumulators + 4 K rows + 1 query: 21 of the 32 zmm registers.
  static constexpr int kTokenBlock = 4;
  static constexpr int kValueChunks = 4;

  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float ReduceAdd(V v) { return _mm512_reduce_add_ps(v); }
  static V MaskTail(V x, int32_t valid) {
    const __mmask16 keep = valid >= 16 ? 0xffff : valid <= 0 ? 0 : (1u << valid) - 1;
    return _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), keep, x);
  }
  static float ReduceMax(V v) { return _mm512_reduce_max_ps(v); }
  static V MaskFrom(V x, V limit, float pos) {
    const __mmask16 hidden = _mm512_cmp_ps_mask(_mm512_set1_ps(pos), limit, _CMP_GE_OQ);
    return _mm512_mask_mov_ps(x, hidden, _mm512_set1_ps(-INFINITY));
  }

  // Reduces the 16 accumulators of a 4-query × 4-token block in one transposing tree (30
  // shuffles instead of 64) and stores query q's four sums at p[q·kPieceTokens ..].
  static void StoreSums(const V (&acc)[4][4], float* p) {
    V pair[8];  // pair[i]: per 128-bit block, partial sums of acc #2i and #2i+1
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const V a = acc[(2 * i) / 4][(2 * i) % 4];
      const V b = acc[(2 * i + 1) / 4][(2 * i + 1) % 4];
      pair[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
    V quad[4];  // quad[i]: per 128-bit block, lane j holds a partial sum of acc #4i+j
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      quad[i] = _mm512_add_ps(_mm512_shuffle_ps(pair[2 * i], pair[2 * i + 1], 0x44),
                              _mm512_shuffle_ps(pair[2 * i], pair[2 * i + 1], 0xee));
    }
    // Fold the four 128-bit blocks: [A01 A23 B01 B23] from quads 0/1, [C01 C23 D01 D23] from 2/3.
    const V x0 = _mm512_add_ps(_mm512_shuffle_f32x4(quad[0], quad[1], 0x88),
                               _mm512_shuffle_f32x4(quad[0], quad[1], 0xdd));
    const V x1 = _mm512_add_ps(_mm512_shuffle_f32x4(quad[2], quad[3], 0x88),
                               _mm512_shuffle_f32x4(quad[2], quad[3], 0xdd));
    const V sums =
        _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x88), _mm512_shuffle_f32x4(x0, x1, 0xdd));
    _mm_storeu_ps(p, _mm512_castps512_ps128(sums));
    _mm_storeu_ps(p + kPieceTokens, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(p + 2 * kPieceTokens, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(p + 3 * kPieceTokens, _mm512_extractf32x4_ps(sums, 3));
  }

  // e^x = 2^n · e^r with n = round(x·log2 e), |r| ≤ ln2/2, e^r by a degree-7 polynomial
  // (relative error ~1e-7); lanes below the f32 normal range give exactly 0.
  static V Exp(V x) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_GE_OQ);
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.37626f)), _mm512_set1_ps(-87.33654f));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(y, n));
  }

  static V LoadKv(const float* p, KvF32) { return _mm512_loadu_ps(p); }
  static V LoadKv(const uint16_t* p, KvF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V LoadKv(const uint16_t* p, KvBF16) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }

  static void StoreKv(uint16_t* p, V v, KvF16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Round to nearest even on the top 16 bits; NaN stays NaN (quiet bit forced), as FloatToBf16.
  static void StoreKv(uint16_t* p, V v, KvBF16) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i bits = _mm512_mask_mov_epi32(rounded, is_nan, nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bits));
  }
};

void AttendTile(const TileArgs& args) { AttendTileImpl<Avx512Traits>(args); }
void StoreRow(const float* src, void* dst, int64_t n, KvDType dtype) {
  StoreRowImpl<Avx512Traits>(src, dst, n, dtype);
}

constexpr KernelTable kTable{CpuIsa::kAvx512, Avx512Traits::kLanes, &AttendTile, &StoreRow};

}  // namespace

const KernelTable& Avx512Kernels() { return kTable; }

}  // namespace tandem::attention_cpu
