// LaunchFlashInferMerge (flashinfer_attention.h): FlashInfer's MergeState / MergeStateInPlace
// folding Tandem's n partials ([n][items][head_dim], natural-log LSE) pairwise into out.
// FlashInfer's LSEs are base 2: the inputs are scaled by log2 e into scratch and the merged LSE
// back by ln 2 (flashinfer_plan.h). Two empty partials merge to out 0, lse −inf, as in
// attention/lse_merge.h; unlike Tandem's merge, an empty partial's output must be finite
// (FlashInfer weighs it by 0 rather than skipping it) — Tandem's kernels write 0 there.
#include <cuda_runtime.h>

#include <exception>
#include <flashinfer/attention/cascade.cuh>

#include "absl/strings/str_cat.h"
#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void ScaleKernel(const float* x, int64_t n, float factor, float* y) {
  const int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (i < n) y[i] = x[i] * factor;
}

absl::Status Scale(const float* x, int64_t n, float factor, float* y, cudaStream_t s) {
  ScaleKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, s>>>(x, n, factor, y);
  return ToStatus(cudaGetLastError(), "flashinfer merge: lse base");
}

}  // namespace

int64_t FlashInferMergeScratchFloats(int32_t n, int64_t items) { return (int64_t{n} + 1) * items; }

absl::Status LaunchFlashInferMerge(int32_t n, const float* partial_out, const float* partial_lse,
                                   int64_t items, int32_t head_dim, float* out, float* lse_out,
                                   float* scratch, void* stream) {
  if (n < 1 || items < 0 ||
      (head_dim != 64 && head_dim != 128 && head_dim != 256 && head_dim != 512)) {
    return absl::InvalidArgumentError(absl::StrCat("flashinfer merge: n ", n, ", items ", items,
                                                   ", head_dim ", head_dim,
                                                   " (n >= 1; head_dim 64, 128, 256 or 512)"));
  }
  if (items == 0) return absl::OkStatus();
  if (items > int64_t{0x7fffffff}) {
    return absl::InvalidArgumentError(absl::StrCat("flashinfer merge: ", items, " items"));
  }
  const auto s = static_cast<cudaStream_t>(stream);
  float* lse2 = scratch;                          // [n][items]
  float* merged2 = scratch + int64_t{n} * items;  // [items]
  if (absl::Status st = Scale(partial_lse, int64_t{n} * items, flashinfer_plan::kLog2E, lse2, s);
      !st.ok()) {
    return st;
  }
  const auto rows = static_cast<uint32_t>(items);
  const auto d = static_cast<uint32_t>(head_dim);
  auto* v = const_cast<float*>(partial_out);
  try {
    if (n == 1) {
      TANDEM_RETURN_IF_CUDA_ERROR(
          cudaMemcpyAsync(out, v, items * head_dim * sizeof(float), cudaMemcpyDeviceToDevice, s));
      TANDEM_RETURN_IF_CUDA_ERROR(
          cudaMemcpyAsync(merged2, lse2, items * sizeof(float), cudaMemcpyDeviceToDevice, s));
    } else {
      TANDEM_RETURN_IF_CUDA_ERROR((flashinfer::MergeState<float, float>(
          v, lse2, v + items * head_dim, lse2 + items, out, merged2, rows, 1, d, s)));
      for (int32_t i = 2; i < n; ++i) {
        TANDEM_RETURN_IF_CUDA_ERROR(flashinfer::MergeStateInPlace<float>(
            out, merged2, v + i * items * head_dim, lse2 + i * items, rows, 1, d, nullptr, s));
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("flashinfer merge: ", e.what()));
  }
  if (lse_out == nullptr) return absl::OkStatus();
  return Scale(merged2, items, flashinfer_plan::kLn2, lse_out, s);
}

}  // namespace tandem::gpu
