// The panel kernel (quant_panel_gemm.h) on the AVX2 (+ FMA, F16C) path. Compiled with those flags
// only for this file; called only when the CPU has them (quant_gemv.cc).
#include <immintrin.h>

#include "model/cpu/hadd_reduce4.h"
#include "model/cpu/quant_panel_gemm_impl.h"

namespace tandem::quant::internal {
namespace {

struct Avx2Panel {
  using V = __m256;
  static constexpr int kLanes = 8;
  // 3 weight rows × 4 activation rows or 4 × 3: 12 accumulators + 3 vectors of the shorter side
  // + 1 of the other, the 16 ymm registers; 7 loads per 12 FMAs. Fewer accumulators do not cover
  // the FMA latency: a 3 × 2 block takes as long as a 3 × 4 one (Zen 5). Batches of 1, 2 or 5
  // (only when a caller asks for them) end in blocks of 12 / MB weight rows.
  static constexpr int kMinMb = 3, kMb = 4;
  static constexpr int kNb(int mb) { return 12 / mb; }
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static void Reduce4(const V* in, float* out) { HaddReduce4(in, out); }
  static DequantFn Dequant(GgmlType type, bool packed) { return Avx2Dequant(type, packed); }
};

}  // namespace

void Avx2PanelGemm(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  impl::PanelGemm<Avx2Panel>(a, n_begin, n_end);
}

}  // namespace tandem::quant::internal
