// RAII for CUDA streams and events, and the stream a rank thread's CUDA backend works on.
//
// A CudaBackend creates one non-blocking stream and binds it to its rank thread. Other CUDA code
// running on that thread — the NCCL communicator — enqueues on the bound stream, so collectives
// are ordered with the backend's kernels without extra synchronisation. The binding is weak: it
// ends when the backend (the stream's owner) is destroyed, and a thread with no live binding gets
// nullptr (callers then use cudaStreamPerThread).
//
// Thread-safety: CudaStream/CudaEvent are immutable handles (the CUDA calls on them are
// thread-safe); the binding is per thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace tandem::gpu {

class CudaStream {
 public:
  // A stream on `device` that does not synchronise with the legacy default stream.
  static absl::StatusOr<std::shared_ptr<CudaStream>> Create(int32_t device);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }
  int32_t device() const { return device_; }

 private:
  CudaStream(int32_t device, cudaStream_t stream) : device_(device), stream_(stream) {}
  const int32_t device_;
  const cudaStream_t stream_;
};

class CudaEvent {
 public:
  // A timing-free event on `device` (cheapest to record and query).
  static absl::StatusOr<std::unique_ptr<CudaEvent>> Create(int32_t device);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  CudaEvent(int32_t device, cudaEvent_t event) : device_(device), event_(event) {}
  const int32_t device_;
  const cudaEvent_t event_;
};

// Binds `stream` (weakly) to the calling thread, replacing any earlier binding.
void BindStreamToThisThread(const std::shared_ptr<CudaStream>& stream);
// The calling thread's bound stream while its owner lives; nullptr otherwise.
std::shared_ptr<CudaStream> StreamBoundToThisThread();

}  // namespace tandem::gpu
