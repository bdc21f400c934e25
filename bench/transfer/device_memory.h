// Device memory for transfer_bench --memory cuda (docs/gpu.md#gpu-direct-kv): allocation,
// host<->device copies and the cudaMemcpy device-to-device baseline, behind a build-independent
// header. A build with the CUDA backend implements it with the CUDA runtime
// (device_memory_cuda.cc); any other build (device_memory_none.cc) reports UNAVAILABLE from
// every call, so the benchmark says "no CUDA device" instead of producing a number.
// Thread-safety: free functions; each call selects `device` itself.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/kv_pool_memory.h"
#include "kv_transfer/transfer_types.h"

namespace tandem::bench {

// OK when `device` exists; UNAVAILABLE "no CUDA device: <why>" otherwise. Fills *name with the
// device's name when OK.
[[nodiscard]] absl::Status CudaDeviceAvailable(int32_t device, std::string* name);

// cudaMalloc'd memory on `device`, freed with the returned object.
[[nodiscard]] absl::StatusOr<std::unique_ptr<KvPoolMemory>> AllocateDeviceMemory(int32_t device,
                                                                                 int64_t bytes);
[[nodiscard]] absl::Status CopyToDevice(void* dst, const void* src, int64_t bytes);
[[nodiscard]] absl::Status CopyToHost(void* dst, const void* src, int64_t bytes);

// Wall time of copying every `copies[i]` from src + src_offset to dst + dst_offset with
// cudaMemcpyAsync device-to-device on one stream, synchronised at the end (the copy list a
// planned pull moves, as the GPU's own copy engine does it in one process).
// REQUIRES: every copy is in bounds of both buffers.
[[nodiscard]] absl::StatusOr<absl::Duration> TimeDeviceCopies(
    int32_t device, const void* src, void* dst, absl::Span<const TransferCopy> copies);

}  // namespace tandem::bench
