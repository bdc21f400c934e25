// AVX2 (+ FMA, F16C) attention kernels. Compiled with those flags only for this file; called
// only when the CPU has them (SelectKernels).
#include <immintrin.h>

#include "attention/cpu/attention_kernel.h"
#include "attention/cpu/attention_tile_query_lanes.h"

namespace tandem::attention_cpu {
namespace {

struct Avx2Traits {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kQueryBlock = 4;
  // 4 queries × 2 tokens = 8 accumulators + 2 K rows + 1 query: 11 of the 16 ymm registers.
  static constexpr int kTokenBlock = 2;
  static constexpr int kValueChunks = 2;

  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float ReduceAdd(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static V MaskTail(V x, int32_t valid) {
    const __m256 lane = _mm256_setr_ps(0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f);
    const __m256 keep = _mm256_cmp_ps(lane, _mm256_set1_ps(static_cast<float>(valid)), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x, keep);
  }
  static float ReduceMax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Reduces the 8 accumulators of a 4-query × 2-token block in one transposing tree and stores
  // query q's two sums at p[q·kPieceTokens ..].
  static void StoreSums(const V (&acc)[4][2], float* p) {
    V pair[4];  // pair[q]: per 128-bit half, partial sums of acc[q][0] and acc[q][1]
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      pair[q] = _mm256_add_ps(_mm256_unpacklo_ps(acc[q][0], acc[q][1]),
                              _mm256_unpackhi_ps(acc[q][0], acc[q][1]));
    }
    // quad[i]: per 128-bit half, [q=2i t0, q=2i t1, q=2i+1 t0, q=2i+1 t1] partial sums.
    V quad[2];
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) {
      quad[i] = _mm256_add_ps(_mm256_shuffle_ps(pair[2 * i], pair[2 * i + 1], 0x44),
                              _mm256_shuffle_ps(pair[2 * i], pair[2 * i + 1], 0xee));
    }
    // Fold the halves: low half of the result for queries 0/1, high half for queries 2/3.
    const V sums = _mm256_add_ps(_mm256_permute2f128_ps(quad[0], quad[1], 0x20),
                                 _mm256_permute2f128_ps(quad[0], quad[1], 0x31));
    alignas(32) float s[8];
    _mm256_store_ps(s, sums);
    for (int q = 0; q < 4; ++q) {
      p[q * kPieceTokens] = s[2 * q];
      p[q * kPieceTokens + 1] = s[2 * q + 1];
    }
  }

  // Same range reduction and polynomial as the AVX-512 path; 2^n built in the exponent field
  // (n ∈ [−126, 127] after the clamp, so it is always a normal number).
  static V Exp(V x) {
    const V live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_GE_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.37626f)), _mm256_set1_ps(-87.33654f));
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    V y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), live);
  }

  static V LoadKv(const float* p, KvF32) { return _mm256_loadu_ps(p); }
  static V LoadKv(const uint16_t* p, KvF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V LoadKv(const uint16_t* p, KvBF16) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }

  static void StoreKv(uint16_t* p, V v, KvF16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Round to nearest even on the top 16 bits; NaN stays NaN (quiet bit forced), as FloatToBf16.
  static void StoreKv(uint16_t* p, V v, KvBF16) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    // |u| > 0x7f800000 as signed compare is safe: the sign bit is cleared first.
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                              _mm256_set1_epi32(0x7f800000));
    const __m256i bits = _mm256_blendv_epi8(rounded, nan, is_nan);
    // Every lane is ≤ 0xffff, so the unsigned-saturating pack is exact; it packs within 128-bit
    // halves, hence the permute that brings the two halves' results together.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
};

// The query-lanes path's traits (attention_tile_query_lanes.h): 16 lanes as two 8-lane halves,
// every operation applied to each half with Avx2Traits' own code, so each lane computes exactly
// what an AVX-512 lane computes. Scores 4 tokens per pass over the queries: 8 accumulators, two
// query halves and a broadcast K element fit the 16 ymm registers (16 tokens would spill).
struct Avx2PairTraits {
  struct V {
    __m256 lo, hi;
  };
  using Narrow = Avx2Traits;
  static constexpr int kLanes = 16;
  static constexpr int32_t kScoreTokens = 4;
  using N = Avx2Traits;

  static V Zero() { return {N::Zero(), N::Zero()}; }
  static V Set1(float x) {
    const __m256 v = N::Set1(x);
    return {v, v};
  }
  static V Load(const float* p) { return {N::Load(p), N::Load(p + 8)}; }
  static void Store(float* p, V v) {
    N::Store(p, v.lo);
    N::Store(p + 8, v.hi);
  }
  static V Add(V a, V b) { return {N::Add(a.lo, b.lo), N::Add(a.hi, b.hi)}; }
  static V Sub(V a, V b) { return {N::Sub(a.lo, b.lo), N::Sub(a.hi, b.hi)}; }
  static V Mul(V a, V b) { return {N::Mul(a.lo, b.lo), N::Mul(a.hi, b.hi)}; }
  static V Max(V a, V b) { return {N::Max(a.lo, b.lo), N::Max(a.hi, b.hi)}; }
  static V Fma(V a, V b, V c) { return {N::Fma(a.lo, b.lo, c.lo), N::Fma(a.hi, b.hi, c.hi)}; }
  static V Exp(V x) { return {N::Exp(x.lo), N::Exp(x.hi)}; }
  static V MaskFrom(V x, V limit, float pos) {
    const __m256 at = _mm256_set1_ps(pos), inf = _mm256_set1_ps(-INFINITY);
    return {_mm256_blendv_ps(x.lo, inf, _mm256_cmp_ps(at, limit.lo, _CMP_GE_OQ)),
            _mm256_blendv_ps(x.hi, inf, _mm256_cmp_ps(at, limit.hi, _CMP_GE_OQ))};
  }
  template <class S, class Tag>
  static V LoadKv(const S* p, Tag tag) {
    return {N::LoadKv(p, tag), N::LoadKv(p + 8, tag)};
  }
};

// The key-lanes traits with the query-lanes path attached.
struct Avx2TileTraits : Avx2Traits {
  using QueryLanes = Avx2PairTraits;
};

void AttendTile(const TileArgs& args) { AttendTileImpl<Avx2TileTraits>(args); }
void StoreRow(const float* src, void* dst, int64_t n, KvDType dtype) {
  StoreRowImpl<Avx2Traits>(src, dst, n, dtype);
}

constexpr KernelTable kTable{CpuIsa::kAvx2, Avx2Traits::kLanes, &AttendTile, &StoreRow};

}  // namespace

const KernelTable& Avx2Kernels() { return kTable; }

}  // namespace tandem::attention_cpu
