#include "common/cuda/cuda_buffer.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace tandem::gpu {

absl::StatusOr<std::unique_ptr<CudaDeviceBuffer>> CudaDeviceBuffer::Create(int32_t device,
                                                                           int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative allocation of ", bytes, " bytes"));
  }
  const ScopedDevice scope(device);
  TANDEM_RETURN_IF_ERROR(scope.status());
  void* p = nullptr;
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  if (absl::Status s = ToStatus(cudaMalloc(&p, size),
                                absl::StrCat("cudaMalloc(", bytes, " bytes) on device ", device));
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<CudaDeviceBuffer>(new CudaDeviceBuffer(device, p, bytes));
}

CudaDeviceBuffer::~CudaDeviceBuffer() {
  const ScopedDevice scope(device_);
  cudaFree(data_);
}

absl::StatusOr<std::unique_ptr<PinnedBuffer>> PinnedBuffer::Create(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative allocation of ", bytes, " bytes"));
  }
  void* p = nullptr;
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  if (absl::Status s = ToStatus(cudaHostAlloc(&p, size, cudaHostAllocPortable),
                                absl::StrCat("cudaHostAlloc(", bytes, " bytes)"));
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<PinnedBuffer>(new PinnedBuffer(p, bytes));
}

PinnedBuffer::~PinnedBuffer() { cudaFreeHost(data_); }

}  // namespace tandem::gpu
