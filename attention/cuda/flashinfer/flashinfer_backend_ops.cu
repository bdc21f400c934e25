// LaunchFlashInferRopeInPlace and LaunchFlashInferCorrectPartial (flashinfer_backend_ops.h).
#include <cuda_runtime.h>

#include <exception>
#include <flashinfer/attention/cascade.cuh>

#include "absl/strings/str_cat.h"
#include "attention/cuda/flashinfer/fi_rope_in_place.cuh"
#include "attention/cuda/flashinfer/flashinfer_backend_ops.h"
#include "attention/cuda/flashinfer/flashinfer_plan.h"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

// scratch[i] = L_me·log2 e, scratch[items + i] = log2 Σ_{j≠me} exp(L_j) (−inf when none).
__global__ void SplitLseKernel(int32_t n, int32_t me, const float* all_lse, int64_t items,
                               float* scratch) {
  const int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (i >= items) return;
  const float kNegInf = -INFINITY;
  float mx = kNegInf;
  for (int32_t j = 0; j < n; ++j) {
    const float l = all_lse[j * items + i];
    if (j != me && l > mx) mx = l;
  }
  float rest = kNegInf;
  if (mx != kNegInf) {
    float s = 0.f;
    for (int32_t j = 0; j < n; ++j) {
      const float l = all_lse[j * items + i];
      if (j != me && l != kNegInf) s += expf(l - mx);
    }
    rest = (mx + logf(s)) * flashinfer_plan::kLog2E;
  }
  scratch[i] = all_lse[me * items + i] * flashinfer_plan::kLog2E;
  scratch[items + i] = rest;
}

}  // namespace

absl::Status LaunchFlashInferRopeInPlace(float* x, int64_t m, int32_t heads, int32_t head_dim,
                                         const int64_t* positions, float theta, bool adjacent_pairs,
                                         const FiRopeScaling& scaling, void* stream) {
  return fi_internal::RopeInPlace("flashinfer rope", x, m, heads, head_dim, positions, theta,
                                  adjacent_pairs, scaling, stream);
}

absl::Status LaunchFlashInferCorrectPartial(int32_t n, int32_t me, const float* all_lse,
                                            int64_t items, int32_t head_dim, float* out,
                                            const float* zeros, float* scratch,
                                            int32_t items_per_block, void* stream) {
  if (n < 1 || me < 0 || me >= n || items < 0 ||
      (head_dim != 64 && head_dim != 128 && head_dim != 256 && head_dim != 512) ||
      items_per_block < 1 || items_per_block > 16 || items % items_per_block != 0 ||
      items / items_per_block > int64_t{0x7fffffff}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flashinfer correct: n ", n, ", me ", me, ", items ", items, ", head_dim ", head_dim,
        ", items_per_block ", items_per_block,
        " (0 <= me < n; head_dim 64, 128, 256 or 512; items_per_block in [1, 16] dividing items)"));
  }
  if (items == 0) return absl::OkStatus();
  const auto s = static_cast<cudaStream_t>(stream);
  SplitLseKernel<<<(items + kThreads - 1) / kThreads, kThreads, 0, s>>>(n, me, all_lse, items,
                                                                        scratch);
  TANDEM_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  try {
    // The merged LSE overwrites scratch[0, items): not needed by the caller.
    TANDEM_RETURN_IF_CUDA_ERROR(flashinfer::MergeStateInPlace<float>(
        out, scratch, const_cast<float*>(zeros), scratch + items,
        static_cast<uint32_t>(items / items_per_block), static_cast<uint32_t>(items_per_block),
        static_cast<uint32_t>(head_dim), /*mask=*/nullptr, s));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("flashinfer correct: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace tandem::gpu
