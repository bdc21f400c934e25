#include "common/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace tandem::gpu {

absl::Status ToStatus(cudaError_t error, absl::string_view context) {
  if (error == cudaSuccess) return absl::OkStatus();
  // The runtime also remembers a non-sticky error as the thread's "last error"; it has been
  // handled here, so clear it lest the next launch check (cudaGetLastError) report it again.
  (void)cudaGetLastError();
  const std::string message =
      absl::StrCat(context, ": CUDA error ", cudaGetErrorName(error), " (", static_cast<int>(error),
                   "): ", cudaGetErrorString(error));
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorStubLibrary:
    case cudaErrorDeviceUninitialized:
    case cudaErrorSystemNotReady:
      return absl::UnavailableError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorLaunchTimeout:
      return absl::DeadlineExceededError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace tandem::gpu
