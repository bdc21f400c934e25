// Element-wise and row-wise CPU kernels of the Llama forward (everything that is not a GEMM or
// attention). Shapes are row-major; every function parallelises over rows with
// common/parallel_for.h and is reentrant.
#pragma once

#include <cstdint>

#include "model/backend.h"

namespace tandem::cpu {

// y[i][:] = x[i][:] · w / sqrt(mean(x[i]²) + eps); y may alias x.
void RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps, float* y);

// Rotary embedding in place on x [m][heads][head_dim] at positions[m], base `theta`.
// kAdjacentPairs rotates (x[2i], x[2i+1]); kRotateHalf rotates (x[i], x[i + head_dim/2]); both
// with frequency theta^(−2i/head_dim).
void Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
          const RopeParams& params);

// out = silu(gate) · up; out may alias gate or up.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// x += y.
void Add(float* x, const float* y, int64_t n);

// dst[i] = src[index[i]] (rows of `cols`); index −1 → zeros.
void GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols, float* dst);

}  // namespace tandem::cpu
