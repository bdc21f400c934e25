// CUDA kernels of the Llama forward other than GEMMs and attention, mirroring model/cpu/cpu_ops.h
// operation for operation (same formulas, same float/double choices), plus the two helpers of
// the bf16 GEMM path.
//
// No CUDA types here: `stream` is a cudaStream_t passed as void*. Every pointer is device memory
// of the current device. Shapes are row-major. Functions check sizes (INVALID_ARGUMENT), enqueue
// and return; zero-sized calls enqueue nothing. Reentrant.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "model/backend.h"

namespace tandem::gpu {

// y[i][:] = x[i][:] · w / sqrt(mean(x[i]²) + eps), the sum of squares in double; y may alias x.
[[nodiscard]] absl::Status LaunchRmsNorm(const float* x, const float* w, int64_t m, int64_t n,
                                         float eps, float* y, void* stream);

// residual += x, then out = LaunchRmsNorm(residual) (ComputeBackend::AddRmsNorm): bit-identical
// to LaunchAdd followed by LaunchRmsNorm, in one pass. out may alias x, not residual.
[[nodiscard]] absl::Status LaunchAddRmsNorm(float* residual, const float* x, const float* w,
                                            int64_t m, int64_t n, float eps, float* out,
                                            void* stream);

// Rotary embedding in place on x [m][heads][head_dim] at positions [m]; angles in double as on
// the CPU. kAdjacentPairs rotates (x[2i], x[2i+1]), kRotateHalf (x[i], x[i + head_dim/2]).
// params.freq_factors (host, head_dim/2 divisors, head_dim <= 512) travel as kernel arguments;
// cos and sin are multiplied by params.mscale.
[[nodiscard]] absl::Status LaunchRope(float* x, int64_t m, int32_t heads, int32_t head_dim,
                                      const int64_t* positions, const RopeParams& params,
                                      void* stream);

// out = silu(gate) · up, n elements; out may alias gate or up.
[[nodiscard]] absl::Status LaunchSiluMul(const float* gate, const float* up, int64_t n, float* out,
                                         void* stream);

// x += y, n elements.
[[nodiscard]] absl::Status LaunchAdd(float* x, const float* y, int64_t n, void* stream);

// dst[i] = src[index[i]] (rows of `cols` floats); index −1 → zeros.
[[nodiscard]] absl::Status LaunchGatherRows(const float* src, const int64_t* index, int64_t m,
                                            int64_t cols, float* dst, void* stream);

// out[i] = table[ids[i]] (rows of `hidden` floats).
[[nodiscard]] absl::Status LaunchEmbedding(const float* table, const int32_t* ids, int64_t m,
                                           int64_t hidden, float* out, void* stream);

// y = bf16(x), round to nearest even (attention/kv_dtype.h FloatToBf16), n elements.
[[nodiscard]] absl::Status LaunchToBf16(const float* x, int64_t n, uint16_t* y, void* stream);

// y[i][j] += bias[j] for y [m][n].
[[nodiscard]] absl::Status LaunchAddBias(float* y, const float* bias, int64_t m, int64_t n,
                                         void* stream);

}  // namespace tandem::gpu
