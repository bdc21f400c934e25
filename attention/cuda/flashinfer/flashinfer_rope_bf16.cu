// LaunchFlashInferRopeInPlaceBf16 (flashinfer_backend_ops.h): FlashInfer's RoPE on bf16
// activations (the backend's TANDEM_CUDA_ACTIVATIONS=bf16), its own file so CI compiles it
// beside the f32 one.
#include <cuda_bf16.h>

#include "attention/cuda/flashinfer/fi_rope_in_place.cuh"
#include "attention/cuda/flashinfer/flashinfer_backend_ops.h"

namespace tandem::gpu {

absl::Status LaunchFlashInferRopeInPlaceBf16(uint16_t* x, int64_t m, int32_t heads,
                                             int32_t head_dim, const int64_t* positions,
                                             float theta, bool adjacent_pairs,
                                             const FiRopeScaling& scaling, void* stream) {
  return fi_internal::RopeInPlace("flashinfer rope (bf16)", reinterpret_cast<nv_bfloat16*>(x), m,
                                  heads, head_dim, positions, theta, adjacent_pairs, scaling,
                                  stream);
}

}  // namespace tandem::gpu
