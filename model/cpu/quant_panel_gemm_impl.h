// The panel kernel (quant_panel_gemm.h), written once over an ISA traits type P. Included only
// by quant_panel_gemm_avx2.cc and quant_panel_gemm_avx512.cc; everything here is in an anonymous
// namespace, so the two ISA builds never meet at link time.
//
// P provides: V (a vector of kLanes floats), Zero, Load, Fma(a, b, c) = a·b + c, Reduce4 (the
// lane sums of 4 vectors, each in the same fixed tree), the micro-kernel's blocks — kMinMb ..
// kMb activation rows against kNb(MB) weight rows — and Dequant (the path's DequantRows).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "model/cpu/quant_gemv_impl.h"
#include "model/cpu/quant_panel_gemm.h"

namespace tandem::quant::impl {
namespace {  // one copy per including ISA file

// Outputs of weight rows [n, n + NB) (panel rows w, k floats apart) × activation rows
// [m0, m0 + MB). One accumulator per output and one reduction per output, the same in every
// block shape (quant_panel_gemm.h: the results do not depend on the blocking).
template <class P, int NB, int MB>
[[gnu::always_inline]] inline void PanelBlock(const GemvArgs& a, const float* w, int64_t n,
                                              int64_t m0) {
  using V = typename P::V;
  const int64_t k = a.w.k;
  const float* x = a.x + m0 * k;
  V acc[NB][MB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) acc[r][i] = P::Zero();
  }
  for (int64_t t = 0; t < k; t += P::kLanes) {
    // The shorter side's vectors in registers, the other side's loaded once each.
    if constexpr (NB <= MB) {
      V wv[NB];
#pragma GCC unroll 16
      for (int r = 0; r < NB; ++r) wv[r] = P::Load(w + r * k + t);
#pragma GCC unroll 16
      for (int i = 0; i < MB; ++i) {
        const V xv = P::Load(x + i * k + t);
#pragma GCC unroll 16
        for (int r = 0; r < NB; ++r) acc[r][i] = P::Fma(wv[r], xv, acc[r][i]);
      }
    } else {
      V xv[MB];
#pragma GCC unroll 16
      for (int i = 0; i < MB; ++i) xv[i] = P::Load(x + i * k + t);
#pragma GCC unroll 16
      for (int r = 0; r < NB; ++r) {
        const V wv = P::Load(w + r * k + t);
#pragma GCC unroll 16
        for (int i = 0; i < MB; ++i) acc[r][i] = P::Fma(wv, xv[i], acc[r][i]);
      }
    }
  }
  // Reduced four at a time, padded with zero vectors (a lane sum of zeros disturbs nothing:
  // each output's tree sees only its own vector).
  constexpr int kOut = NB * MB, kPadded = (kOut + 3) / 4 * 4;
  V flat[kPadded];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) flat[r * MB + i] = acc[r][i];
  }
#pragma GCC unroll 16
  for (int j = kOut; j < kPadded; ++j) flat[j] = P::Zero();
  float sums[kPadded];
#pragma GCC unroll 16
  for (int j = 0; j < kPadded; j += 4) P::Reduce4(flat + j, sums + j);
  float v[NB][MB];
#pragma GCC unroll 16
  for (int r = 0; r < NB; ++r) {
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i) v[r][i] = sums[r * MB + i];
  }
  StoreResults<NB, MB>(a, n, m0, v);
}

// Panel rows [n0, n1) (w: row n0's weights) against activation rows [m0, m0 + MB), P::kNb(MB)
// rows at a time, then 2 and 1.
template <class P, int MB>
void PanelRows(const GemvArgs& a, const float* w, int64_t n0, int64_t n1, int64_t m0) {
  constexpr int kNb = P::kNb(MB);
  const int64_t k = a.w.k;
  int64_t n = n0;
  for (; n + kNb <= n1; n += kNb) PanelBlock<P, kNb, MB>(a, w + (n - n0) * k, n, m0);
  if constexpr (kNb > 2) {
    for (; n + 2 <= n1; n += 2) PanelBlock<P, 2, MB>(a, w + (n - n0) * k, n, m0);
  }
  for (; n < n1; ++n) PanelBlock<P, 1, MB>(a, w + (n - n0) * k, n, m0);
}

// Whether r activation rows split into blocks of P::kMinMb .. P::kMb rows.
template <class P>
constexpr bool Splits(int64_t r) {
  for (int64_t j = 0; j * P::kMinMb <= r; ++j) {
    if (r <= j * P::kMb) return true;
  }
  return false;
}

// The next block of activation rows, rest of them left: as large as it can be while what is left
// still splits into blocks of at least kMinMb rows (blocks of fewer rows have too few
// accumulators to cover the FMA latency). Only a batch below 2·kMinMb that does not split gets a
// smaller block.
template <class P>
constexpr int NextBlock(int64_t rest) {
  for (int b = rest < P::kMb ? static_cast<int>(rest) : P::kMb; b >= P::kMinMb; --b) {
    if (Splits<P>(rest - b)) return b;
  }
  return rest < P::kMb ? static_cast<int>(rest) : P::kMb;
}

template <class P, int MB = P::kMb>
[[gnu::always_inline]] inline void PanelRowsOf(int mb, const GemvArgs& a, const float* w,
                                               int64_t n0, int64_t n1, int64_t m0) {
  if constexpr (MB >= 1) {
    if (mb == MB) {
      PanelRows<P, MB>(a, w, n0, n1, m0);
    } else {
      PanelRowsOf<P, MB - 1>(mb, a, w, n0, n1, m0);
    }
  }
}

template <class P>
void PanelGemm(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.w.k;
  const internal::DequantFn dequant = P::Dequant(a.w.type, a.w.packed);
  // Cache-line aligned: with k a multiple of 32 every panel row then is too, and no vector load
  // of the panel straddles two lines (a malloc'd buffer is only 16-byte aligned: half the ymm and
  // three quarters of the zmm loads would).
  constexpr int64_t kAlign = 64 / sizeof(float);
  thread_local std::vector<float> panel_buffer;
  panel_buffer.resize(static_cast<size_t>(internal::kPanelRows * k + kAlign));
  float* const panel =
      panel_buffer.data() +
      (kAlign - (reinterpret_cast<uintptr_t>(panel_buffer.data()) / sizeof(float)) % kAlign) %
          kAlign;
  for (int64_t t = n_begin; t < n_end; t += internal::kPanelRows) {
    const int64_t te = t + internal::kPanelRows < n_end ? t + internal::kPanelRows : n_end;
    dequant(a.w, t, te, panel);
    // The next panel's blocks, fetched while this one's FMAs run: the dequantiser reads its rows
    // in order, but the hardware prefetchers stop at every 4 KiB page (RowsBlock's comment), and
    // a matrix streamed from memory (lm_head) would wait on each miss.
    const int64_t next_rows = n_end - te < internal::kPanelRows ? n_end - te : internal::kPanelRows;
    const char* next = reinterpret_cast<const char*>(a.w.data + te * a.w.row_bytes);
    for (int64_t o = 0; o < next_rows * a.w.row_bytes; o += 64) {
      _mm_prefetch(next + o, _MM_HINT_T1);
    }
    for (int64_t m0 = 0; m0 < a.m;) {
      const int mb = NextBlock<P>(a.m - m0);
      PanelRowsOf<P>(mb, a, panel, t, te, m0);
      m0 += mb;
    }
  }
}

}  // namespace
}  // namespace tandem::quant::impl
