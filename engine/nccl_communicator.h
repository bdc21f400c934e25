// Communicator over NCCL for the rank threads of one instance, one GPU per rank
// (docs/design.md#instances).
// Built only with the CUDA backend; engine/backend_registry.cc is the only user outside tests.
//
// Semantics are those of engine/communicator.h, with these specifics:
// * Buffers are device memory on the member's GPU. Collectives are enqueued on the stream of the
//   calling thread's CUDA backend (common/cuda/cuda_stream.h; cudaStreamPerThread when the thread
//   has none), so they are ordered after the backend's kernels, and every collective returns
//   only once it has completed on the GPU (as the CPU communicator does): an error or a peer that
//   never arrives is reported by the call itself, never by a later backend op.
// * dtypes: AllGather and Broadcast move bytes (any dtype). ReduceScatter and AllReduce sum kF32,
//   kF16, kBF16, kI32 and kI64 natively in NCCL; kU8 is INVALID_ARGUMENT. The summation order is
//   NCCL's (ring/tree), deterministic for a given topology and size and identical on every rank,
//   but not the CPU communicator's rank order, so sums may differ from it in the last bits.
// * Barrier is a one-element all-reduce on a device word of the communicator.
// * Every wait is bounded: communicators are created non-blocking and every NCCL call and GPU
//   completion is polled against the group's timeout. On timeout the group is aborted
//   (DEADLINE_EXCEEDED) and the member's NCCL communicator is torn down with ncclCommAbort.
//   Abort() from any member or thread marks the whole group; each member aborts its own NCCL
//   communicator in its next (or current) collective, or at destruction.
// * The group is unusable after an error; destruction always uses ncclCommAbort (local and
//   bounded, unlike ncclCommDestroy, which may wait for peers).
//
// Thread-safety: one handle per rank thread; Abort() may be called from any thread.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/communicator.h"

namespace tandem {

// The one translation of NCCL results: invalid argument/usage → INVALID_ARGUMENT; system, remote
// and CUDA errors → UNAVAILABLE (a peer, the network or the device is gone); others → INTERNAL.
[[nodiscard]] absl::Status ToStatus(ncclResult_t result, absl::string_view context);

// One communicator per entry of `devices` (device index of each member, in group-rank order),
// created together from the calling thread. UNAVAILABLE when a device is missing,
// INVALID_ARGUMENT when the list is empty or repeats a device (NCCL needs one GPU per member),
// DEADLINE_EXCEEDED when initialisation takes longer than `timeout`.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateNcclCommunicators(
    const std::vector<int32_t>& devices, absl::Duration timeout);

}  // namespace tandem
