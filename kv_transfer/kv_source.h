// KvSource: the prefill side of a KV transfer, independent of the transport
// (docs/design.md#kv-transfer).
//
// A source owns one KV pool per global rank of a prefill instance and the TransferMetadata that
// lets a decode instance's KvPuller (kv_puller.h) read them: per rank whatever the transport
// needs to reach the pool (worker address, pool base, remote key). Readers pull one-sidedly;
// the source does nothing per transfer. Implementations: UcxTransferSource (ucx/, the real
// one), FakeKvSource (fake/, in-process pools for node-level tests).
//
// Thread-safety: immutable after creation; pool(r) memory is the engine's to synchronise (write
// KV before publishing a KvHandle that lets anyone read it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_pool_memory.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

struct KvSourceOptions {
  std::string engine_id;
  uint64_t epoch = 0;
  uint64_t compat_hash = 0;
  KvLayout layout;
  // Bytes of every rank's pool (all ranks of a valid layout hold the same number of KV heads,
  // so this is PoolBytes(RankPoolGeometry(layout, r), num_blocks) for any r).
  int64_t pool_bytes_per_rank = 0;
};

// INVALID_ARGUMENT for an empty engine id, a layout that ValidateParallelConfig rejects (role
// prefill) or pool_bytes_per_rank <= 0. Every implementation runs this first.
[[nodiscard]] absl::Status ValidateKvSourceOptions(const KvSourceOptions& options);

class KvSource {
 public:
  virtual ~KvSource() = default;

  virtual const TransferMetadata& metadata() const = 0;
  int32_t world() const { return metadata().layout.world(); }
  // REQUIRES: 0 <= rank < world().
  virtual KvPoolMemory& pool(int32_t rank) const = 0;

  // A non-owning view of rank `rank`'s pool, shaped for the engine's KvPoolAllocator:
  //   allocator = [&src](int32_t r, int64_t b) { return src.BorrowPool(r, b); };
  // INVALID_ARGUMENT for a rank outside [0, world()) or more bytes than the pool holds.
  // REQUIRES: this source outlives the view (the pool stays published to readers).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<KvPoolMemory>> BorrowPool(int32_t rank,
                                                                         int64_t bytes) const;
};

// How a prefill node makes its source (the transport is the process's choice, main.cc).
using KvSourceFactory =
    std::function<absl::StatusOr<std::unique_ptr<KvSource>>(const KvSourceOptions& options)>;

}  // namespace tandem
