// The panel kernel (quant_panel_gemm.h) on the AVX-512 (F, BW, VL + FMA, F16C) path. Compiled with
// those flags only for this file; called only when the CPU has them (quant_gemv.cc).
#include <immintrin.h>

#include "model/cpu/hadd_reduce4.h"
#include "model/cpu/quant_panel_gemm_impl.h"

namespace tandem::quant::internal {
namespace {

struct Avx512Panel {
  using V = __m512;
  static constexpr int kLanes = 16;
  // 4 weight rows × 3 to 6 activation rows: up to 24 accumulators + 4 weight vectors + 1
  // activation vector of the 32 zmm registers; 10 loads per 24 FMAs. Batches of 1 or 2 (only
  // when a caller asks for them) take 12 / MB weight rows.
  static constexpr int kMinMb = 3, kMb = 6;
  static constexpr int kNb(int mb) { return mb >= 3 ? 4 : 12 / mb; }
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  // Lanes l and l + 8 first, then the AVX2 path's tree over the 8 sums: the same for every output.
  static void Reduce4(const V* in, float* out) {
    __m256 h[4];
    for (int j = 0; j < 4; ++j) {
      h[j] = _mm256_add_ps(_mm512_castps512_ps256(in[j]),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(in[j]), 1)));
    }
    HaddReduce4(h, out);
  }
  static DequantFn Dequant(GgmlType type, bool packed) { return Avx512Dequant(type, packed); }
};

}  // namespace

void Avx512PanelGemm(const GemvArgs& a, int64_t n_begin, int64_t n_end) {
  impl::PanelGemm<Avx512Panel>(a, n_begin, n_end);
}

}  // namespace tandem::quant::internal
