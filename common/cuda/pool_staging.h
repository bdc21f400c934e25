// A pinned host mirror of one rank's device KV pool, for KV transfer over a transport that can
// only read and write host memory (docs/design.md#pools-and-ucx: Debian's UCX has no CUDA support,
// so GPU pools are staged through pinned host memory).
//
// Usage on a prefill rank: after the step that wrote the KV has been synchronised
// (backend.Synchronize()), ToHost(ranges) copies the blocks to be served into the mirror, whose
// base address and size are what the transport registers and advertises. On a decode rank the
// transport writes into the mirror and ToDevice(ranges) copies the pulled blocks into the pool
// before the step that reads them is enqueued. Offsets are pool byte offsets and are the same on
// both sides (the mirror has the pool's layout), so the planner's ranges (HeadsOfBlock,
// BlockRange in attention/pool_layout.h) apply unchanged.
//
// Copies are cut into chunks of at most `chunk_bytes` that alternate between two copy streams,
// so a long list of ranges keeps two DMA transfers in flight and small ranges do not serialise
// behind one large one. Both functions return when every byte has arrived, or
// DEADLINE_EXCEEDED after `timeout`, or INVALID_ARGUMENT (before copying anything) when a range
// leaves the pool. Ranges may be given in any order; overlapping ranges are copied twice (same
// bytes).
//
// REQUIRES: no kernel writes (ToHost) or reads (ToDevice) the ranges while the call runs — the
// copy streams are not ordered with the backend's stream.
//
// Thread-safety: one call at a time per PoolStaging (the copy streams are shared).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "attention/pool_layout.h"

namespace tandem::gpu {

struct PoolStagingOptions {
  int64_t chunk_bytes = int64_t{4} << 20;
  absl::Duration timeout = absl::Seconds(30);
};

class PoolStaging {
 public:
  // device_pool: `bytes` bytes of device memory on `device` (a pool from the backend). Allocates
  // the mirror (cudaHostAlloc, portable) and two copy streams and events on that device.
  static absl::StatusOr<std::unique_ptr<PoolStaging>> Create(int32_t device, void* device_pool,
                                                             int64_t bytes,
                                                             const PoolStagingOptions& options);
  ~PoolStaging();
  PoolStaging(const PoolStaging&) = delete;
  PoolStaging& operator=(const PoolStaging&) = delete;

  void* host() const;  // the mirror: register it with the transport
  int64_t bytes() const;

  absl::Status ToHost(absl::Span<const ByteRange> ranges);    // device pool → mirror
  absl::Status ToDevice(absl::Span<const ByteRange> ranges);  // mirror → device pool

 private:
  struct Impl;
  explicit PoolStaging(std::unique_ptr<Impl> impl);
  absl::Status Copy(absl::Span<const ByteRange> ranges, bool to_host);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::gpu
