#include "common/cuda/cuda_stream.h"

#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace tandem::gpu {
namespace {

std::weak_ptr<CudaStream>& ThreadBinding() {
  thread_local std::weak_ptr<CudaStream> binding;
  return binding;
}

}  // namespace

absl::StatusOr<std::shared_ptr<CudaStream>> CudaStream::Create(int32_t device) {
  const ScopedDevice scope(device);
  TANDEM_RETURN_IF_ERROR(scope.status());
  cudaStream_t s = nullptr;
  TANDEM_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return std::shared_ptr<CudaStream>(new CudaStream(device, s));
}

CudaStream::~CudaStream() {
  const ScopedDevice scope(device_);
  cudaStreamDestroy(stream_);
}

absl::StatusOr<std::unique_ptr<CudaEvent>> CudaEvent::Create(int32_t device) {
  const ScopedDevice scope(device);
  TANDEM_RETURN_IF_ERROR(scope.status());
  cudaEvent_t e = nullptr;
  TANDEM_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return std::unique_ptr<CudaEvent>(new CudaEvent(device, e));
}

CudaEvent::~CudaEvent() {
  const ScopedDevice scope(device_);
  cudaEventDestroy(event_);
}

void BindStreamToThisThread(const std::shared_ptr<CudaStream>& stream) { ThreadBinding() = stream; }

std::shared_ptr<CudaStream> StreamBoundToThisThread() { return ThreadBinding().lock(); }

}  // namespace tandem::gpu
