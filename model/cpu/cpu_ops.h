// Element-wise and row-wise CPU kernels of the Llama forward (everything that is not a GEMM or
// attention). Shapes are row-major; every function parallelises over rows with
// common/parallel_for.h and is reentrant.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/cpu/cpu_isa.h"
#include "model/backend.h"

namespace tandem::cpu {

// y[i][:] = x[i][:] · w / sqrt(mean(x[i]²) + eps); y may alias x.
void RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps, float* y);

// mscale · cos/sin of pos·theta^(−2i/head_dim)/factor[i] for positions [0, capacity), computed in
// double once and grown on demand (RoPE otherwise costs a sincos per (row, pair) per layer). Not
// thread-safe: one per backend (rank thread).
class RopeTable {
 public:
  // Makes positions [0, max_position] available for (theta, head_dim, freq_factors: head_dim/2
  // divisors or null for none, mscale: multiplies cos and sin); rebuilds on a change.
  void Ensure(int64_t max_position, int32_t head_dim, float theta,
              const float* freq_factors = nullptr, float mscale = 1.f);
  const float* cos(int64_t pos) const { return cos_.data() + pos * half_; }
  const float* sin(int64_t pos) const { return sin_.data() + pos * half_; }

 private:
  int32_t half_ = 0;
  float theta_ = 0.f;
  float mscale_ = 1.f;
  std::vector<float> factors_;  // empty: none
  int64_t capacity_ = 0;
  std::vector<float> cos_, sin_;
};

// Rotary embedding in place on x [m][heads][head_dim] at positions[m] (within the table; a row at
// position −1, the engine's padding, is left unchanged).
// kAdjacentPairs rotates (x[2i], x[2i+1]); kRotateHalf rotates (x[i], x[i + head_dim/2]).
void Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
          RopeStyle style, const RopeTable& table);

// out = silu(gate) · up; out may alias gate or up.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// The same for elements [begin, end) on the calling thread, on path `isa` (which the CPU must
// run): silu_simd.h's vectorised exp on AVX-512 and AVX2, the scalar formula with std::exp on
// the portable path. Each element's result does not depend on the range it is computed in.
void SiluMulOnPath(CpuIsa isa, const float* gate, const float* up, int64_t begin, int64_t end,
                   float* out);

// x += y.
void Add(float* x, const float* y, int64_t n);

// dst[i] = src[index[i]] (rows of `cols`); index −1 → zeros.
void GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols, float* dst);

}  // namespace tandem::cpu
