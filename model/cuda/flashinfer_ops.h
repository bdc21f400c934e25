// The CUDA backend's RMSNorm, fused add + RMSNorm, RoPE and DCP partial correction through
// FlashInfer when the FlashInfer path is selected (TANDEM_CUDA_ATTENTION=flashinfer, the switch
// that also selects FlashInfer's attention in attention_runner.h), through Tandem's kernels
// otherwise (docs/gpu.md#flashinfer). Each call asks flashinfer_op_choice.h which runs; every
// distinct reason for keeping Tandem's kernel on the FlashInfer path is written to stderr once
// ("cuda backend: TANDEM_CUDA_ATTENTION=flashinfer: rope: rope_freq_factors (...); Tandem's
// kernel runs").
//
// * Same contracts as the kernels they replace (model/cuda/cuda_ops.h, cuda_ops_bf16.h,
//   attention/cuda/cuda_attention.h LaunchCorrectPartial with no merged LSE); `bf16` says the
//   activation buffers hold bf16 bits (the backend's TANDEM_CUDA_ACTIVATIONS=bf16).
// * Device pointers; positions are the device copy of the step's int64 positions.
// * Everything is enqueued on `stream`; the correction's scratch and zero partial are grow-only
//   device buffers, and growing them first waits (bounded by `timeout`) for queued work that may
//   still read the old ones. The backend calls CorrectPartial outside graph capture only.
// * Not thread-safe: used from the backend's thread.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cuda/cuda_buffer.h"
#include "model/backend.h"
#include "model/cuda/flashinfer_op_choice.h"

namespace tandem::gpu {

class FlashInferOps {
 public:
  // Reads TANDEM_CUDA_ATTENTION (INVALID_ARGUMENT for an unknown value, as the runner does).
  static absl::StatusOr<std::unique_ptr<FlashInferOps>> Create(int32_t device, bool bf16,
                                                               absl::Duration timeout);
  // selected: the FlashInfer path is on (tests construct it directly).
  FlashInferOps(int32_t device, bool bf16, bool selected, absl::Duration timeout);

  absl::Status RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps, float* y,
                       cudaStream_t stream);
  // ComputeBackend::AddRmsNorm: FlashInfer's FusedAddRMSNorm when out == x (its in-place form),
  // else LaunchAddRmsNorm (f32) or LaunchAddBf16 + LaunchRmsNormBf16 (bf16).
  absl::Status AddRmsNorm(float* residual, const float* x, const float* w, int64_t m, int64_t n,
                          float eps, float* out, cudaStream_t stream);
  absl::Status Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
                    const RopeParams& params, cudaStream_t stream);
  absl::Status CorrectPartial(int32_t n, int32_t me, const float* all_lse, int64_t items,
                              int32_t head_dim, float* out, cudaStream_t stream);

  bool selected() const { return selected_; }
  // Calls of `op` that ran FlashInfer's kernel (tests check the path was taken).
  int64_t flashinfer_calls(FiOp op) const { return calls_[static_cast<size_t>(op)]; }

 private:
  // The choice for r; logs its reason once when Tandem's kernel runs on the FlashInfer path.
  // choice (optional): the whole choice (RoPE's FlashInfer arguments).
  bool UseFlashInfer(const FiOpRequest& r, FiOpChoice* choice = nullptr);
  absl::Status Grow(std::unique_ptr<CudaDeviceBuffer>& buf, int64_t bytes, bool zero,
                    cudaStream_t stream);

  const int32_t device_;
  const bool bf16_;
  const bool selected_;
  const absl::Duration timeout_;
  std::set<std::string> logged_;
  std::array<int64_t, 4> calls_{};
  std::unique_ptr<CudaDeviceBuffer> scratch_;  // correction: base-2 LSEs
  std::unique_ptr<CudaDeviceBuffer> zeros_;    // correction: the zero partial
};

}  // namespace tandem::gpu
