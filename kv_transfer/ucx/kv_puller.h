// UcxKvPuller: the UCX implementation of KvPuller (kv_transfer/kv_puller.h), the decode side of
// the KV transfer (docs/design.md#pulling-kv). One per decode rank.
//
// Owns a UCX context and worker and a cache of connections (endpoint + unpacked rkey) keyed by
// (source engine id, epoch, source rank). Execute() pulls a planned list of copies from one
// source instance into this rank's pool:
//   * every copy is bounds-checked against the source rank's pool and the local pool before
//     anything is posted (INVALID_ARGUMENT naming the copy);
//   * a host source pool UCX mapped into this process (shared memory, RemoteRank::mapped_pool)
//     is read with memcpy into a host local pool, copy by copy, on this thread — no UCX call per
//     copy (non-temporal stores for pulls of stream_copy_min_bytes and more); device memory on
//     either side (GPU-direct) is only ever read by UCX gets;
//   * otherwise small copies are gathered (gather_plan.h): contiguous source ranges are read
//     with one ucp_get_nbx each into a staging slot and scattered locally; the rest are read
//     with one ucp_get_nbx per copy straight into the pool;
//   * at most `max_in_flight` gets are outstanding (and at most `staging_slots` segments);
//   * a new endpoint in peer-failure mode is flushed, and the flush awaited like a get, so its
//     set-up (a round trip with the source) is complete when Execute returns OK, even when every
//     copy was read from a mapped pool (docs/kv_transfer.md: UCX 1.13 aborts the source when a
//     puller vanishes with that set-up half done);
//   * no completion for `stall_timeout` → DEADLINE_EXCEEDED naming the source ranks still owed
//     data; their endpoints are force-closed and dropped, so the call returns, never hangs;
//   * `cancel` set → CANCELLED: posting stops; endpoints with gets still in flight are closed
//     (their gets complete as cancelled) and dropped, so nothing is left referencing the local
//     pool when Execute returns;
//   * UCX reporting a source endpoint failed (peer error handling), or a get failing on it →
//     UNAVAILABLE naming the source rank; that connection is dropped (never reused) and the next
//     Execute reconnects. When the failed endpoint came from the cache (UCX lost it while
//     idle, e.g. across a network outage), every cached connection to that source is dropped
//     and the pull is retried once on fresh endpoints before the error is returned.
//   * the ranks blamed for a stall or failure go to options.failed_source_ranks.
// After a non-OK return the local pool may hold part of the data; the caller discards it.
// PullProgress counts copies: a gathered segment counts as posted when its get is, and its
// copies as completed once they are scattered.
//
// Each attempt runs as a UcxPullSession (pull_session.h): connect, post window, reap,
// close/abandon, with the stall/cancel/blame decisions in a PullWatchdog (pull_watchdog.h) that
// FakeKvPuller shares.
//
// Thread-safety: thread-compatible — one thread at a time (the owning decode rank's thread)
// calls any method. Connections to an older epoch of an engine are dropped when a newer epoch
// of the same engine id is first used.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kv_transfer/gather_plan.h"
#include "kv_transfer/kv_puller.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/remote_rank.h"
#include "kv_transfer/ucx/ucx_pool.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

struct UcxKvPullerOptions {
  UcxOptions ucx;
  // Read pools UCX mapped into this process with memcpy (off: one get per copy, as before).
  bool read_mapped_pools = true;
  // A pull (one Execute) of at least this many bytes copies from mapped pools with
  // non-temporal stores (StreamCopy / Crc32cStreamCopy, kv_transfer/stream_copy.h): its
  // destination lines are not read into the cache first, a third less memory traffic. Below it,
  // plain stores leave a small prompt's KV cached for the first decode step. 0: always.
  int64_t stream_copy_min_bytes = int64_t{4} << 20;
  // Gather small copies into segment reads (off: one get per copy).
  bool gather_small_copies = true;
  GatherOptions gather;
  // Staging slots of gather.max_segment_bytes each, allocated on the first gathered pull and
  // kept: 16 × 1 MiB by default. ≥ 1.
  int32_t staging_slots = 16;
  // With gets in flight and nothing to do, progress the worker for this long before blocking
  // on its event fd.
  absl::Duration spin_before_wait = absl::Microseconds(100);
  // GPU-direct KV (docs/gpu.md#gpu-direct-kv): when set, AllocatePool takes device memory from
  // device_pools(device, bytes) and registers it with UCX as `device_pool_memory` (kCuda; kHost
  // only in tests, which register host memory through the same path), and Execute treats the
  // local pool as memory of that type: with kCuda every byte moves by UCX get, none by memcpy
  // (PullAccessFor, kv_transfer/kv_pool_path.h). Create fails FAILED_PRECONDITION for kCuda when
  // UCX reports no CUDA memory type.
  KvPoolAllocator device_pools;
  int32_t device = 0;
  KvMemoryType device_pool_memory = KvMemoryType::kCuda;
};

class UcxKvPuller final : public KvPuller {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<UcxKvPuller>> Create(
      const UcxKvPullerOptions& options);
  ~UcxKvPuller() override;
  UcxKvPuller(const UcxKvPuller&) = delete;
  UcxKvPuller& operator=(const UcxKvPuller&) = delete;

  // Copies copies[i].length bytes from source rank copies[i].src_rank's pool at src_offset to
  // local_pool at dst_offset, for every i. REQUIRES: copies' destination ranges do not overlap.
  // Metadata is validated (ValidateTransferMetadata) but the compatibility hash is not: run
  // CheckHandshake once per (engine id, epoch) first.
  [[nodiscard]] absl::Status Execute(const TransferMetadata& source,
                                     absl::Span<const TransferCopy> copies,
                                     absl::Span<std::byte> local_pool,
                                     const PullOptions& options) override;

  // A UcxPool in this puller's UCX context, for the decode rank's own KV cache.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<KvPoolMemory>> AllocatePool(int64_t bytes) override;

  // Drops the cached connections to (engine_id, epoch).
  void Forget(absl::string_view engine_id, uint64_t epoch) override;
  int64_t cached_connections() const { return static_cast<int64_t>(connections_.size()); }
  // Memory type of the local pool Execute writes (kHost unless options.device_pools is set).
  KvMemoryType local_memory() const {
    return options_.device_pools ? options_.device_pool_memory : KvMemoryType::kHost;
  }

 private:
  using Key = std::tuple<std::string, uint64_t, int32_t>;  // engine id, epoch, source rank

  UcxKvPuller(const UcxKvPullerOptions& options, std::unique_ptr<UcxWorker> worker)
      : options_(options), worker_(std::move(worker)) {}
  // One attempt of a pull, in phases (pull_session.h), borrows the worker, the connection cache
  // and the staging buffer.
  friend class UcxPullSession;
  // *reused: the connection came from the cache.
  absl::StatusOr<RemoteRank*> Connection(const TransferMetadata& source, int32_t rank,
                                         bool* reused);
  void Drop(const TransferMetadata& source, int32_t rank);

  const UcxKvPullerOptions options_;
  std::unique_ptr<UcxWorker> worker_;
  // staging_slots × gather.max_segment_bytes, or null until a pull gathers.
  std::unique_ptr<std::byte[]> staging_;
  // Declared after the worker: connections close (using the worker) before it is destroyed.
  absl::flat_hash_map<Key, std::unique_ptr<RemoteRank>> connections_;
};

}  // namespace tandem
