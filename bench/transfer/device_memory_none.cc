// device_memory.h for builds without the CUDA backend: nothing is available.
#include "bench/transfer/device_memory.h"

namespace tandem::bench {
namespace {

absl::Status NoCuda() {
  return absl::UnavailableError(
      "no CUDA device: this build has no CUDA backend (configure with -DTANDEM_CUDA=ON)");
}

}  // namespace

absl::Status CudaDeviceAvailable(int32_t, std::string*) { return NoCuda(); }
absl::StatusOr<std::unique_ptr<KvPoolMemory>> AllocateDeviceMemory(int32_t, int64_t) {
  return NoCuda();
}
absl::Status CopyToDevice(void*, const void*, int64_t) { return NoCuda(); }
absl::Status CopyToHost(void*, const void*, int64_t) { return NoCuda(); }
absl::StatusOr<absl::Duration> TimeDeviceCopies(int32_t, const void*, void*,
                                                absl::Span<const TransferCopy>) {
  return NoCuda();
}

}  // namespace tandem::bench
