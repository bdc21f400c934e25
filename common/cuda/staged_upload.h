// Host→device upload of the small host arrays an op needs on the GPU (token ids, positions,
// slots, row metadata, block tables), for one stream.
//
// The bytes go through a pinned host buffer, so the copy is asynchronous and the host array may
// change as soon as Upload returns. An upload whose bytes equal the previous one's reuses the
// device copy: the forward passes the same positions, slots and rows to Rope, WriteKv and
// Attention on every layer of a step, so after the first layer nothing is copied.
//
// The returned pointer is valid for work enqueued on the stream after Upload returns and before
// the next Upload (whose copy is ordered after that work on the same stream).
//
// Thread-safety: one owner thread (the backend's).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cuda/cuda_buffer.h"
#include "common/cuda/cuda_stream.h"

namespace tandem::gpu {

class StagedUpload {
 public:
  // `stream` (on `device`) must outlive this object; `timeout` bounds every wait.
  static absl::StatusOr<std::unique_ptr<StagedUpload>> Create(int32_t device, cudaStream_t stream,
                                                              absl::Duration timeout);
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;

  // Device copy of host [data, data + bytes); nullptr for zero bytes.
  absl::StatusOr<const void*> Upload(const void* data, int64_t bytes);

 private:
  StagedUpload(int32_t device, cudaStream_t stream, absl::Duration timeout,
               std::unique_ptr<CudaEvent> copied)
      : device_(device), stream_(stream), timeout_(timeout), copied_(std::move(copied)) {}
  absl::Status Reserve(int64_t bytes);

  const int32_t device_;
  const cudaStream_t stream_;
  const absl::Duration timeout_;
  std::unique_ptr<CudaEvent> copied_;     // recorded after the last copy out of pinned_
  bool copy_pending_ = false;             // copied_ was recorded and not yet seen complete
  std::unique_ptr<PinnedBuffer> pinned_;  // holds the last uploaded bytes
  std::unique_ptr<CudaDeviceBuffer> device_copy_;
  int64_t last_bytes_ = -1;  // −1: nothing uploaded (or the buffers were replaced)
};

}  // namespace tandem::gpu
