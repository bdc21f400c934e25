// y[m][n] = x[m][k]·Wᵀ + b on the GPU: W stored as bf16 (converted once, round to nearest even),
// bias as f32 and bf16; the GEMM runs in cuBLAS with bf16 inputs and fp32 accumulation and output.
// The f32 activation is converted to bf16 by a kernel first (into caller-provided scratch).
// With bf16 activations the backend runs the weights through lt_gemm.h instead (weight(),
// bias_f32(), bias_bf16()).
//
// Also the one translation of cuBLAS errors into absl::Status (STYLE.md "Errors"):
// CUBLAS_STATUS_ALLOC_FAILED → RESOURCE_EXHAUSTED, NOT_INITIALIZED → UNAVAILABLE,
// INVALID_VALUE / NOT_SUPPORTED / ARCH_MISMATCH → INVALID_ARGUMENT, others → INTERNAL.
//
// Thread-safety: a CudaLinear is immutable after Create and may be used by several streams of
// its device concurrently.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/cuda/cuda_buffer.h"
#include "model/backend.h"

namespace tandem::gpu {

[[nodiscard]] absl::Status ToStatus(cublasStatus_t status, absl::string_view context);

class CudaLinear final : public LinearOp {
 public:
  // w: host [n][k] f32; bias: host [n] or nullptr. Uploads on `stream` and waits (bounded by
  // `timeout`) so the host staging can be dropped.
  static absl::StatusOr<std::unique_ptr<CudaLinear>> Create(int32_t device, cudaStream_t stream,
                                                            const float* w, int64_t n, int64_t k,
                                                            const float* bias,
                                                            absl::Duration timeout);
  CudaLinear(const CudaLinear&) = delete;
  CudaLinear& operator=(const CudaLinear&) = delete;

  int64_t n() const override { return n_; }
  int64_t k() const override { return k_; }
  int32_t device() const { return weight_->device(); }

  // x: device [m][k] f32; x_bf16: device scratch of m·k bf16; y: device [m][n] f32.
  // Enqueues on the handle's stream.
  absl::Status Forward(cublasHandle_t handle, const float* x, int64_t m, uint16_t* x_bf16,
                       float* y) const;

  // The fallback of the bf16-activation path when cuBLASLt does not fit (gemm_plan.h): x bf16
  // [m][k]; y [m][n] f32 or bf16 (`y_bf16`); beta 0 (y =) or 1 (y +=); no bias (the caller
  // adds it with a kernel).
  absl::Status ForwardBf16In(cublasHandle_t handle, const uint16_t* x, int64_t m, void* y,
                             bool y_bf16, float beta) const;

  const uint16_t* weight() const { return static_cast<const uint16_t*>(weight_->data()); }
  // [n] or nullptr without a bias.
  const float* bias_f32() const { return bias_ == nullptr ? nullptr : bias_->f32(); }
  const uint16_t* bias_bf16() const {
    return bias16_ == nullptr ? nullptr : static_cast<const uint16_t*>(bias16_->data());
  }
  int64_t resident_bytes() const override { return n_ * k_ * 2 + (bias_ == nullptr ? 0 : n_ * 6); }

 private:
  CudaLinear(int64_t n, int64_t k, std::unique_ptr<CudaDeviceBuffer> weight,
             std::unique_ptr<CudaDeviceBuffer> bias, std::unique_ptr<CudaDeviceBuffer> bias16)
      : n_(n),
        k_(k),
        weight_(std::move(weight)),
        bias_(std::move(bias)),
        bias16_(std::move(bias16)) {}
  const int64_t n_;
  const int64_t k_;
  std::unique_ptr<CudaDeviceBuffer> weight_;  // bf16 [n][k]
  std::unique_ptr<CudaDeviceBuffer> bias_;    // f32 [n], or null
  std::unique_ptr<CudaDeviceBuffer> bias16_;  // bf16 [n] (cuBLASLt's bias epilogue), or null
};

}  // namespace tandem::gpu
