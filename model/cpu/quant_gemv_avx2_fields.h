// Shared pieces of the AVX2 field-factored GEMVs for packed Q5_0/Q5_1 (quant_gemv_avx2_q5.h) and
// Q6_K (quant_gemv_avx2_q6k.h). Included only by those headers, so only by quant_gemv_avx2.cc.
//
// Both kernels mask a quant's bit field in place inside a 32-bit lane, leaving q·2^p with at most
// six significant bits (exact in f32 after the int → float convert), and multiply it by an
// activation copy scaled by 2^{−p}: the product is q·x bit for bit. Per 32 weights and
// activation row a block's four 8-weight products are summed (S = Σ q·x), and S times the block's
// scale is added into a partial sum for a group of blocks, which is added into the output's
// accumulator once per group — so a single output (batch-1 decode) waits on one add per group,
// not one FMA per block. The operations for an output depend only on its weight row and its
// activation row, never on how many rows are blocked together.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace tandem::quant::impl {
namespace {  // one copy, in quant_gemv_avx2.cc

// part[i] = (or +=, unless first) d · Σ_p q[p]·x_i[8p .. 8p + 7], x_i = x + i·k, for MB rows.
// d is a vector: a scalar scale broadcast, or per-lane scales (Q6_K's 16-element sub-blocks).
template <int MB>
[[gnu::always_inline]] inline void FieldDots(bool first, __m256 (&part)[MB], const __m256 (&q)[4],
                                             __m256 d, const float* x, int64_t k) {
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
    const float* xi = x + i * k;
    __m256 s = _mm256_mul_ps(q[0], _mm256_loadu_ps(xi));
    s = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xi + 8), s);
    s = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xi + 16), s);
    s = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xi + 24), s);
    part[i] = first ? _mm256_mul_ps(s, d) : _mm256_fmadd_ps(s, d, part[i]);
  }
}

template <int MB>
[[gnu::always_inline]] inline void AddParts(__m256 (&acc)[MB], const __m256 (&part)[MB]) {
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) acc[i] = _mm256_add_ps(acc[i], part[i]);
}

// Σ_j a[j]·b[j] over n floats into acc, 8 at a time; the last 8 are masked loads of a (a may
// end a row, possibly the matrix), b padded to a multiple of 8.
[[gnu::always_inline]] inline __m256 MaskedDot(const float* a, const float* b, int64_t n,
                                               __m256 acc) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc);
  if (j < n) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - j)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + j, mask), _mm256_loadu_ps(b + j), acc);
  }
  return acc;
}

// Prefetches a weight row's stream ahead of the kernel (the hardware prefetchers stop at each
// 4 KiB page): at least 2 KiB ahead, `step` bytes per unit of progress.
struct RowPrefetch {
  const char* base;
  int64_t step;
  RowPrefetch(const uint8_t* data, int64_t n, int64_t row_bytes, int64_t units) {
    const int64_t ahead = std::max<int64_t>(2, (2048 + row_bytes - 1) / row_bytes);
    base = reinterpret_cast<const char*>(data + (n + ahead) * row_bytes);
    step = (row_bytes + units - 1) / (units > 0 ? units : 1);
  }
  void Unit(int64_t u) const {
    for (int64_t o = u * step; o < (u + 1) * step; o += 64) _mm_prefetch(base + o, _MM_HINT_T0);
  }
};

}  // namespace
}  // namespace tandem::quant::impl
