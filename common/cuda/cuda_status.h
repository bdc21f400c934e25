// The one translation of CUDA runtime errors into absl::Status (STYLE.md "Errors"), shared by
// every CUDA target (attention kernels, the CUDA backend, pool staging, the NCCL communicator).
//
// Codes: no usable device or driver → UNAVAILABLE; out of device or pinned memory →
// RESOURCE_EXHAUSTED; a launch that timed out → DEADLINE_EXCEEDED; anything else (bad pointer,
// kernel fault, invalid configuration) → INTERNAL, because it is a Tandem bug or a broken device,
// not bad user input. The message names the error, its code and `context` (the failing call).
// Translating an error also clears the calling thread's CUDA "last error", so a handled failure
// (say, an out-of-memory cudaMalloc) is not reported again by the next launch check.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem::gpu {

[[nodiscard]] absl::Status ToStatus(cudaError_t error, absl::string_view context);

}  // namespace tandem::gpu

// Returns ToStatus(call, "<call text>") from the enclosing function unless it is cudaSuccess.
#define TANDEM_RETURN_IF_CUDA_ERROR(call)                        \
  do {                                                           \
    const cudaError_t tandem_cuda_error_ = (call);               \
    if (tandem_cuda_error_ != cudaSuccess) {                     \
      return ::tandem::gpu::ToStatus(tandem_cuda_error_, #call); \
    }                                                            \
  } while (0)
