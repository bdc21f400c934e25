// The element-wise and row-wise kernels of the Llama forward on bf16 activations
// (TANDEM_CUDA_ACTIVATIONS=bf16, docs/gpu.md#bf16-activations-cublaslt-and-cuda-graphs): every
// kernel reads bf16, computes in fp32 (RoPE angles in double, as on the CPU) and rounds its
// result to bf16 once (round to nearest even). Norm weights, biases of the fallback path and the
// embedding table stay f32.
//
// Same conventions as cuda_ops.h: bf16 values are uint16_t bit patterns, `stream` is a
// cudaStream_t passed as void*, pointers are device memory, sizes are checked
// (INVALID_ARGUMENT), zero-sized calls enqueue nothing.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "model/backend.h"

namespace tandem::gpu {

// y[i][:] = x[i][:] · w / sqrt(mean(x[i]²) + eps); y may alias x.
[[nodiscard]] absl::Status LaunchRmsNormBf16(const uint16_t* x, const float* w, int64_t m,
                                             int64_t n, float eps, uint16_t* y, void* stream);

// RoPE in place on x [m][heads][head_dim] (cuda_ops.h LaunchRope's conventions).
[[nodiscard]] absl::Status LaunchRopeBf16(uint16_t* x, int64_t m, int32_t heads, int32_t head_dim,
                                          const int64_t* positions, const RopeParams& params,
                                          void* stream);

// out = silu(gate) · up, n elements; out may alias gate or up.
[[nodiscard]] absl::Status LaunchSiluMulBf16(const uint16_t* gate, const uint16_t* up, int64_t n,
                                             uint16_t* out, void* stream);

// x += y, n elements.
[[nodiscard]] absl::Status LaunchAddBf16(uint16_t* x, const uint16_t* y, int64_t n, void* stream);

// dst[i] = src[index[i]] (rows of `cols` bf16); index −1 → zeros.
[[nodiscard]] absl::Status LaunchGatherRowsBf16(const uint16_t* src, const int64_t* index,
                                                int64_t m, int64_t cols, uint16_t* dst,
                                                void* stream);

// out[i] = bf16(table[ids[i]]) (f32 table rows of `hidden`).
[[nodiscard]] absl::Status LaunchEmbeddingBf16(const float* table, const int32_t* ids, int64_t m,
                                               int64_t hidden, uint16_t* out, void* stream);

// y = float(x), n elements (exact).
[[nodiscard]] absl::Status LaunchBf16ToF32(const uint16_t* x, int64_t n, float* y, void* stream);

// y[i][j] = bf16(y[i][j] + bias[j]) for y [m][n] (the cublasGemmEx fallback's bias).
[[nodiscard]] absl::Status LaunchAddBiasBf16(uint16_t* y, const float* bias, int64_t m, int64_t n,
                                             void* stream);

}  // namespace tandem::gpu
