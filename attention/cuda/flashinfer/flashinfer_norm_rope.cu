// FlashInfer's RMSNorm, fused add + RMSNorm and RoPE (flashinfer_attention.h) on Tandem's f32
// activations. FlashInfer sums squares in float (Tandem's cuda_ops in double) and computes RoPE
// angles in float with fast intrinsics; the cuda tests derive their tolerances from that.
#include <cuda_runtime.h>

#include <exception>
#include <flashinfer/norm.cuh>
#include <flashinfer/pos_enc.cuh>
#include <limits>

#include "absl/strings/str_cat.h"
#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

constexpr int64_t kMaxU32 = std::numeric_limits<uint32_t>::max();

absl::Status CheckRows(const char* what, int64_t m, int64_t n) {
  if (m < 0 || n <= 0 || m > kMaxU32 || n > kMaxU32 || n % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("flashinfer ", what, ": shape [", m, "][", n, "] (n > 0, a multiple of 4)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchFlashInferRmsNorm(const float* x, const float* w, int64_t m, int64_t n,
                                     float eps, float* y, void* stream) {
  if (absl::Status s = CheckRows("rmsnorm", m, n); !s.ok() || m == 0) return s;
  try {
    TANDEM_RETURN_IF_CUDA_ERROR(flashinfer::norm::RMSNorm<float>(
        const_cast<float*>(x), const_cast<float*>(w), y, static_cast<uint32_t>(m),
        static_cast<uint32_t>(n), static_cast<uint32_t>(n), static_cast<uint32_t>(n), eps,
        /*enable_pdl=*/false, static_cast<cudaStream_t>(stream)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("flashinfer rmsnorm: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status LaunchFlashInferAddRmsNorm(float* x, float* residual, const float* w, int64_t m,
                                        int64_t n, float eps, void* stream) {
  if (absl::Status s = CheckRows("add_rmsnorm", m, n); !s.ok() || m == 0) return s;
  try {
    TANDEM_RETURN_IF_CUDA_ERROR(flashinfer::norm::FusedAddRMSNorm<float>(
        x, residual, const_cast<float*>(w), static_cast<uint32_t>(m), static_cast<uint32_t>(n),
        static_cast<uint32_t>(n), static_cast<uint32_t>(n), eps, /*enable_pdl=*/false,
        static_cast<cudaStream_t>(stream)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("flashinfer add_rmsnorm: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status LaunchFlashInferRope(float* q, float* k, int64_t m, int32_t q_heads, int32_t kv_heads,
                                  int32_t head_dim, const int32_t* positions, float theta,
                                  bool adjacent_pairs, void* stream) {
  if (m < 0 || m > kMaxU32 || q_heads <= 0 || kv_heads <= 0 ||
      (head_dim != 64 && head_dim != 128 && head_dim != 256)) {
    return absl::InvalidArgumentError(absl::StrCat("flashinfer rope: m ", m, ", heads ", q_heads,
                                                   "/", kv_heads, ", head_dim ", head_dim,
                                                   " (head_dim 64, 128 or 256)"));
  }
  if (m == 0) return absl::OkStatus();
  const size_t qn = size_t(q_heads) * head_dim, kn = size_t(kv_heads) * head_dim;
  const size_t hd = size_t(head_dim);
  try {
    TANDEM_RETURN_IF_CUDA_ERROR((flashinfer::BatchQKApplyRotaryPosIds<float, int32_t>(
        q, k, q, k, const_cast<int32_t*>(positions), static_cast<uint32_t>(m),
        static_cast<uint32_t>(q_heads), static_cast<uint32_t>(kv_heads),
        static_cast<uint32_t>(head_dim), static_cast<uint32_t>(head_dim), qn, hd, kn, hd, qn, hd,
        kn, hd, adjacent_pairs, /*rope_scale=*/1.f, theta, static_cast<cudaStream_t>(stream))));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("flashinfer rope: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace tandem::gpu
