#include "common/cuda/cuda_device.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

// Yield for the first part of a wait (collectives and short kernels finish within tens of
// microseconds), then sleep in short steps so a long wait does not burn a core.
constexpr absl::Duration kSpinFor = absl::Microseconds(200);
constexpr absl::Duration kSleepStep = absl::Microseconds(20);

}  // namespace

absl::Status CheckCudaDevice(int32_t index) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA device: ", ToStatus(e, "cudaGetDeviceCount").message()));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: cudaGetDeviceCount reports 0");
  if (index < 0 || index >= count) {
    return absl::UnavailableError(absl::StrCat("CUDA device ", index, " is not present (", count,
                                               " device(s): 0..", count - 1, ")"));
  }
  return absl::OkStatus();
}

ScopedDevice::ScopedDevice(int32_t device) {
  status_ = ToStatus(cudaGetDevice(&previous_), "cudaGetDevice");
  if (status_.ok() && previous_ != device) {
    status_ = ToStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
  } else {
    previous_ = -1;  // nothing to restore
  }
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

absl::Status PollUntilDone(absl::FunctionRef<cudaError_t()> query, absl::Duration timeout,
                           absl::string_view what) {
  return PollUntilDone(
      query, [] { return absl::OkStatus(); }, timeout, what);
}

absl::Status PollUntilDone(absl::FunctionRef<cudaError_t()> query,
                           absl::FunctionRef<absl::Status()> abort_check, absl::Duration timeout,
                           absl::string_view what) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  while (true) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return ToStatus(e, what);
    if (absl::Status s = abort_check(); !s.ok()) return s;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": not done within ", absl::FormatDuration(timeout)));
    }
    if (now - start < kSpinFor) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(kSleepStep);
    }
  }
}

}  // namespace tandem::gpu
