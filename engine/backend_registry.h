// The only place that knows which compute backends and communicators were compiled in
// (STYLE.md "Interfaces"). Build options never change this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/kv_pool_memory.h"
#include "engine/communicator.h"
#include "model/backend.h"

namespace tandem {

// "cpu" always; "cuda" in builds with the CUDA backend (and only usable with a GPU present).
std::vector<std::string> CompiledBackends();

// Backend for one rank; device_index selects the GPU for "cuda" (ignored for "cpu").
// INVALID_ARGUMENT for an unknown kind, UNAVAILABLE when compiled in but unusable here.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(absl::string_view kind,
                                                              int32_t device_index);

// Whether the backend's buffers are host memory that any thread (and the UCX transfer) can read
// and write directly: true for "cpu"; false for "cuda" and unknown kinds.
bool BackendMemoryIsHost(absl::string_view kind);

// Device memory for one rank's KV pool that a GPU-direct transport registers in place
// (docs/gpu.md#gpu-direct-kv): cudaMalloc'd on device `device_index` for "cuda" (freed with the
// returned object). INVALID_ARGUMENT for "cpu" (its pools are host memory) and unknown kinds.
absl::StatusOr<std::unique_ptr<KvPoolMemory>> AllocateDeviceKvPool(absl::string_view kind,
                                                                   int32_t device_index,
                                                                   int64_t bytes);

// Communicators for one group whose members are the given device indices, in group-rank order
// (CPU: in-process shared memory; CUDA: NCCL).
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateCommunicators(
    absl::string_view kind, const std::vector<int32_t>& device_indices, absl::Duration timeout);

}  // namespace tandem
