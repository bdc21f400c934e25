#include "model/cuda/cuda_linear.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/kv_dtype.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"
#include "model/cuda/cuda_ops.h"

namespace tandem::gpu {

absl::Status ToStatus(cublasStatus_t status, absl::string_view context) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(context, ": cuBLAS error ", cublasGetStatusName(status), " (",
                   static_cast<int>(status), "): ", cublasGetStatusString(status));
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return absl::UnavailableError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<std::unique_ptr<CudaLinear>> CudaLinear::Create(int32_t device, cudaStream_t stream,
                                                               const float* w, int64_t n, int64_t k,
                                                               const float* bias,
                                                               absl::Duration timeout) {
  if (n < 1 || k < 1 || n > INT32_MAX || k > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear: weight shape [", n, "][", k, "] is outside [1, 2^31)"));
  }
  std::vector<uint16_t> w16(n * k);
  for (int64_t i = 0; i < n * k; ++i) w16[i] = FloatToBf16(w[i]);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CudaDeviceBuffer> weight,
                          CudaDeviceBuffer::Create(device, n * k * int64_t{sizeof(uint16_t)}));
  std::unique_ptr<CudaDeviceBuffer> bias_buf;
  std::unique_ptr<CudaDeviceBuffer> bias16_buf;
  std::vector<uint16_t> b16;
  const ScopedDevice scope(device);
  TANDEM_RETURN_IF_ERROR(scope.status());
  // A copy from pageable memory first waits for the stream without a bound: drain it ourselves.
  TANDEM_RETURN_IF_ERROR(
      PollUntilDone([&] { return cudaStreamQuery(stream); }, timeout, "linear: stream drain"));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(
      weight->data(), w16.data(), w16.size() * sizeof(uint16_t), cudaMemcpyHostToDevice, stream));
  if (bias != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(bias_buf, CudaDeviceBuffer::Create(device, n * int64_t{sizeof(float)}));
    TANDEM_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(bias_buf->data(), bias, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    b16.resize(n);
    for (int64_t i = 0; i < n; ++i) b16[i] = FloatToBf16(bias[i]);
    TANDEM_ASSIGN_OR_RETURN(bias16_buf,
                            CudaDeviceBuffer::Create(device, n * int64_t{sizeof(uint16_t)}));
    TANDEM_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(
        bias16_buf->data(), b16.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice, stream));
  }
  // Pageable sources: the copies are staged before cudaMemcpyAsync returns, but wait for them
  // anyway so a failure is reported here rather than by an unrelated later call.
  TANDEM_RETURN_IF_ERROR(
      PollUntilDone([&] { return cudaStreamQuery(stream); }, timeout, "linear: weight upload"));
  return std::unique_ptr<CudaLinear>(
      new CudaLinear(n, k, std::move(weight), std::move(bias_buf), std::move(bias16_buf)));
}

absl::Status CudaLinear::Forward(cublasHandle_t handle, const float* x, int64_t m, uint16_t* x_bf16,
                                 float* y) const {
  if (m < 0 || m > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("linear: ", m, " rows"));
  }
  if (m == 0) return absl::OkStatus();
  cudaStream_t stream = nullptr;
  TANDEM_RETURN_IF_ERROR(ToStatus(cublasGetStream(handle, &stream), "cublasGetStream"));
  TANDEM_RETURN_IF_ERROR(LaunchToBf16(x, m * k_, x_bf16, stream));
  // Row-major y[m][n] = x[m][k]·Wᵀ is column-major yᵀ[n][m] = W'ᵀ·xᵀ with W' = W read
  // column-major as [k][n] (ld k) and x read column-major as [k][m] (ld k).
  const float one = 1.f;
  const float zero = 0.f;
  TANDEM_RETURN_IF_ERROR(ToStatus(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_), static_cast<int>(m),
                   static_cast<int>(k_), &one, weight_->data(), CUDA_R_16BF, static_cast<int>(k_),
                   x_bf16, CUDA_R_16BF, static_cast<int>(k_), &zero, y, CUDA_R_32F,
                   static_cast<int>(n_), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      absl::StrCat("cublasGemmEx bf16 [", m, "x", k_, "]x[", k_, "x", n_, "]")));
  if (bias_ != nullptr) TANDEM_RETURN_IF_ERROR(LaunchAddBias(y, bias_->f32(), m, n_, stream));
  return absl::OkStatus();
}

absl::Status CudaLinear::ForwardBf16In(cublasHandle_t handle, const uint16_t* x, int64_t m, void* y,
                                       bool y_bf16, float beta) const {
  if (m < 0 || m > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("linear: ", m, " rows"));
  }
  if (m == 0) return absl::OkStatus();
  const float one = 1.f;
  return ToStatus(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_),
                               static_cast<int>(m), static_cast<int>(k_), &one, weight_->data(),
                               CUDA_R_16BF, static_cast<int>(k_), x, CUDA_R_16BF,
                               static_cast<int>(k_), &beta, y, y_bf16 ? CUDA_R_16BF : CUDA_R_32F,
                               static_cast<int>(n_), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  absl::StrCat("cublasGemmEx bf16 in [", m, "x", k_, "]x[", k_, "x", n_, "]"));
}

}  // namespace tandem::gpu
