// Internal to attention/cuda/flashinfer: the body of LaunchFlashInferRopeInPlace{,Bf16}
// (flashinfer_backend_ops.h) for one element type, instantiated in flashinfer_backend_ops.cu
// (float) and flashinfer_rope_bf16.cu (nv_bfloat16) so each file compiles one of them.
#pragma once

#include <cuda_runtime.h>

#include <exception>
#include <flashinfer/pos_enc.cuh>
#include <limits>

#include "absl/strings/str_cat.h"
#include "attention/cuda/flashinfer/fi_rope_scaling.h"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu::fi_internal {

template <typename T>
absl::Status RopeInPlace(const char* what, T* x, int64_t m, int32_t heads, int32_t head_dim,
                         const int64_t* positions, float theta, bool adjacent_pairs,
                         const FiRopeScaling& scaling, void* stream) {
  if (m < 0 || m > std::numeric_limits<uint32_t>::max() || heads < 2 ||
      (head_dim != 64 && head_dim != 128 && head_dim != 256 && head_dim != 512)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": m ", m, ", heads ", heads,
                                                   ", head_dim ", head_dim,
                                                   " (heads >= 2; head_dim 64, 128, 256 or 512)"));
  }
  if (m == 0) return absl::OkStatus();
  const int32_t kv_heads = heads / 2;
  const int32_t q_heads = heads - kv_heads;
  const size_t row = size_t(heads) * head_dim, hd = size_t(head_dim);
  T* k = x + size_t(q_heads) * hd;
  auto* pos = const_cast<int64_t*>(positions);
  const auto n = static_cast<uint32_t>(m), qh = static_cast<uint32_t>(q_heads),
             kh = static_cast<uint32_t>(kv_heads), d = static_cast<uint32_t>(head_dim);
  const auto s = static_cast<cudaStream_t>(stream);
  try {
    if (scaling.llama31) {
      TANDEM_RETURN_IF_CUDA_ERROR((flashinfer::BatchQKApplyLlama31RotaryPosIds<T, int64_t>(
          x, k, x, k, pos, n, qh, kh, d, d, row, hd, row, hd, row, hd, row, hd, adjacent_pairs,
          scaling.rope_scale, theta, scaling.low_freq_factor, scaling.high_freq_factor,
          scaling.old_context_length, s)));
    } else {
      TANDEM_RETURN_IF_CUDA_ERROR((flashinfer::BatchQKApplyRotaryPosIds<T, int64_t>(
          x, k, x, k, pos, n, qh, kh, d, d, row, hd, row, hd, row, hd, row, hd, adjacent_pairs,
          scaling.rope_scale, theta, s)));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace tandem::gpu::fi_internal
