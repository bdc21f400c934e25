// RAII device and pinned-host allocations (CUDA runtime plumbing; the CUDA backend adapts
// CudaDeviceBuffer to its DeviceBuffer interface).
//
// CudaDeviceBuffer: cudaMalloc'd memory on one device (never managed memory: placement and
// migration stay explicit). Freed with cudaFree on its device, which waits for work that may
// still use it, so dropping a buffer while kernels are queued is safe.
// PinnedBuffer: page-locked host memory (cudaHostAlloc, portable to every device), the staging
// side of asynchronous host↔device copies.
//
// Thread-safety: immutable after creation; destruction on any thread.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace tandem::gpu {

class CudaDeviceBuffer final {
 public:
  // At least one byte is allocated so data() is never null; bytes() is what was asked for.
  static absl::StatusOr<std::unique_ptr<CudaDeviceBuffer>> Create(int32_t device, int64_t bytes);
  ~CudaDeviceBuffer();
  CudaDeviceBuffer(const CudaDeviceBuffer&) = delete;
  CudaDeviceBuffer& operator=(const CudaDeviceBuffer&) = delete;

  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  int64_t bytes() const { return bytes_; }
  int32_t device() const { return device_; }

 private:
  CudaDeviceBuffer(int32_t device, void* data, int64_t bytes)
      : device_(device), data_(data), bytes_(bytes) {}
  const int32_t device_;
  void* const data_;
  const int64_t bytes_;
};

class PinnedBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedBuffer>> Create(int64_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  PinnedBuffer(void* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  void* const data_;
  const int64_t bytes_;
};

}  // namespace tandem::gpu
