// KvPuller: the decode side of a KV transfer, independent of the transport
// (docs/design.md#pulling-kv). One per decode rank. Implementations: UcxKvPuller (ucx/, one-sided
// UCX gets), FakeKvPuller (fake/, in-process copies with injectable faults, for node-level tests).
//
// Execute(source, copies, local_pool, options) copies copies[i].length bytes from source rank
// copies[i].src_rank's pool at src_offset to local_pool at dst_offset, for every i. Contract
// every implementation keeps (tests/kv_transfer hold both to it):
//   * metadata is validated (ValidateTransferMetadata) and every copy bounds-checked against the
//     source rank's pool and the local pool before anything moves → INVALID_ARGUMENT naming the
//     field or copy; the compatibility hash is not checked (CheckHandshake, once per epoch);
//   * no copy completes for options.stall_timeout → DEADLINE_EXCEEDED naming the source ranks
//     still owed data; the call returns, never hangs;
//   * options.cancel cancelled → CANCELLED ("after k of n copies"), noticed at once (a cancel
//     wakes the puller's wait through an OnCancel callback);
//   * a source peer failing (connection lost, a get failing) → UNAVAILABLE naming the rank;
//   * the transport reporting success for fewer bytes than asked → DATA_LOSS;
//   * on return nothing writes into local_pool any more. After a non-OK return the pool may hold
//     part of the data; the caller discards it.
// Every source rank a failure is blamed on (failed get or endpoint, stall) is appended once to
// *options.failed_source_ranks when given, so a caller can evict that peer (issue 19).
//
// Thread-safety: thread-compatible — one thread at a time calls any method of one puller;
// different pullers may run concurrently.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cancellation.h"
#include "common/kv_pool_memory.h"
#include "kv_transfer/copy_crcs.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

// Live counters of one Execute, for monitoring (and for tests that act mid-transfer).
// Implementations publish them at least once per turn of their loop, not necessarily per copy.
struct PullProgress {
  std::atomic<int64_t> posted{0};           // copies handed to the transport
  std::atomic<int64_t> completed{0};        // copies finished successfully
  std::atomic<int64_t> completed_bytes{0};  // bytes of those copies
  // Wall time spent posting, accumulated. On UCX shared memory the copy happens inside the post,
  // so there this is most of the transfer.
  std::atomic<int64_t> post_nanos{0};
};

struct PullOptions {
  // ≥ 1. Tiny gets over TCP need a deep window to keep the source busy (measured: 64 → 0.3× the
  // raw loop for 256-byte gets, 1024 → parity); memory cost is one small slot per get.
  int32_t max_in_flight = 1024;
  absl::Duration stall_timeout = absl::Seconds(10);     // > 0
  const CancellationToken* cancel = nullptr;            // optional; wakes the puller's waits
  PullProgress* progress = nullptr;                     // optional
  std::vector<int32_t>* failed_source_ranks = nullptr;  // optional out: peers to blame
  // Optional (copy_crcs.h): CRCs of these spans of the copies, computed in the same pass where
  // the bytes go through this process (a mapped pool, the fake); others are left uncomputed.
  // REQUIRES: copy_crcs->copies() == copies.size() when set.
  CopyCrcs* copy_crcs = nullptr;
};

class KvPuller {
 public:
  virtual ~KvPuller() = default;

  [[nodiscard]] virtual absl::Status Execute(const TransferMetadata& source,
                                             absl::Span<const TransferCopy> copies,
                                             absl::Span<std::byte> local_pool,
                                             const PullOptions& options) = 0;

  // A pool this puller's transport can write into, for the decode rank's own KV cache.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<KvPoolMemory>> AllocatePool(
      int64_t bytes) = 0;

  // Drops whatever the puller cached about (engine_id, epoch) (connections, keys).
  virtual void Forget(absl::string_view engine_id, uint64_t epoch) = 0;
};

// How a decode node makes the puller of its global rank `rank` (the process picks the
// transport in main.cc; tests inject fakes).
using KvPullerFactory = std::function<absl::StatusOr<std::unique_ptr<KvPuller>>(int32_t rank)>;

}  // namespace tandem
