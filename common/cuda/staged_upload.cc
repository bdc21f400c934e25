#include "common/cuda/staged_upload.h"

#include <cstring>

#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace tandem::gpu {

absl::StatusOr<std::unique_ptr<StagedUpload>> StagedUpload::Create(int32_t device,
                                                                   cudaStream_t stream,
                                                                   absl::Duration timeout) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CudaEvent> event, CudaEvent::Create(device));
  return std::unique_ptr<StagedUpload>(new StagedUpload(device, stream, timeout, std::move(event)));
}

absl::Status StagedUpload::Reserve(int64_t bytes) {
  if (pinned_ != nullptr && pinned_->bytes() >= bytes) return absl::OkStatus();
  // Queued kernels may still read the old device copy: let them finish before it is freed.
  TANDEM_RETURN_IF_ERROR(PollUntilDone([&] { return cudaStreamQuery(stream_); }, timeout_,
                                       "staged upload: stream drain before growing"));
  copy_pending_ = false;
  last_bytes_ = -1;
  const int64_t size = bytes + bytes / 2;  // grow geometrically: steps differ in size
  pinned_.reset();
  device_copy_.reset();
  TANDEM_ASSIGN_OR_RETURN(pinned_, PinnedBuffer::Create(size));
  TANDEM_ASSIGN_OR_RETURN(device_copy_, CudaDeviceBuffer::Create(device_, size));
  return absl::OkStatus();
}

absl::StatusOr<const void*> StagedUpload::Upload(const void* data, int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("staged upload: negative size");
  if (bytes == 0) return nullptr;
  if (bytes == last_bytes_ && std::memcmp(pinned_->data(), data, bytes) == 0) {
    return static_cast<const void*>(device_copy_->data());
  }
  TANDEM_RETURN_IF_ERROR(Reserve(bytes));
  const ScopedDevice scope(device_);
  TANDEM_RETURN_IF_ERROR(scope.status());
  if (copy_pending_) {
    // The previous copy may still be reading the pinned buffer (normally long finished).
    TANDEM_RETURN_IF_ERROR(PollUntilDone([&] { return cudaEventQuery(copied_->get()); }, timeout_,
                                         "staged upload: previous copy"));
    copy_pending_ = false;
  }
  std::memcpy(pinned_->data(), data, bytes);
  last_bytes_ = -1;  // until the copy is enqueued, the device copy does not match
  TANDEM_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(device_copy_->data(), pinned_->data(), bytes,
                                              cudaMemcpyHostToDevice, stream_));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaEventRecord(copied_->get(), stream_));
  copy_pending_ = true;
  last_bytes_ = bytes;
  return static_cast<const void*>(device_copy_->data());
}

}  // namespace tandem::gpu
