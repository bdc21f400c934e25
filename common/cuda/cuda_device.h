// CUDA device selection and bounded waiting, shared by every CUDA target.
//
// * CheckCudaDevice: whether device `index` can be used, with the reason when not (UNAVAILABLE:
//   "no CUDA device: ..." when the runtime finds none, "CUDA device 3 is not present ..." when
//   the index is out of range).
// * ScopedDevice: makes a device current on the calling thread and restores the previous one, so
//   code that may run on any thread (destructors, registry) never leaves the thread switched.
// * PollUntilDone: the only way Tandem waits for the GPU. cudaStreamSynchronize and friends block
//   without a bound; this polls a query (cudaStreamQuery, cudaEventQuery, ...) until it stops
//   returning cudaErrorNotReady, yielding at first and then sleeping briefly, and gives up with
//   DEADLINE_EXCEEDED after `timeout`.
//
// Thread-safety: all functions are thread-safe; ScopedDevice affects the calling thread only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem::gpu {

[[nodiscard]] absl::Status CheckCudaDevice(int32_t index);

class ScopedDevice {
 public:
  // Switches to `device` when it is not current; status() reports a failed switch.
  explicit ScopedDevice(int32_t device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

// `query` returns cudaSuccess when done, cudaErrorNotReady while pending, or an error (returned
// through ToStatus with `what`). `abort_check`, polled too, ends the wait early with its status
// when not OK.
[[nodiscard]] absl::Status PollUntilDone(absl::FunctionRef<cudaError_t()> query,
                                         absl::Duration timeout, absl::string_view what);
[[nodiscard]] absl::Status PollUntilDone(absl::FunctionRef<cudaError_t()> query,
                                         absl::FunctionRef<absl::Status()> abort_check,
                                         absl::Duration timeout, absl::string_view what);

}  // namespace tandem::gpu
