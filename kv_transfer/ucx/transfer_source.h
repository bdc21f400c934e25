// TransferSource: the prefill side of the KV transfer (DESIGN.md §6). One per prefill instance.
//
// For every global rank it owns a UCX context, a worker, the rank's KV pool (allocated through
// UCX, see ucx_pool.h) and a progress thread on the worker, and it publishes the instance's
// TransferMetadata (per rank: packed worker address, pool base, pool bytes, packed rkey).
// Readers pull with one-sided gets; the source does nothing per transfer.
//
// Ownership: owns everything above. Destruction joins the progress threads first, then releases
// pools, workers and contexts, in that order. Not copyable or movable.
// Thread-safety: after Create everything is immutable; pool(r) memory is the engine's to
// synchronise (write KV before publishing a KvHandle that lets anyone read it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv_pool_memory.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

struct TransferSourceOptions {
  std::string engine_id;
  uint64_t epoch = 0;
  uint64_t compat_hash = 0;
  KvLayout layout;
  // Bytes of every rank's pool (all ranks of a valid layout hold the same number of KV heads,
  // so this is PoolBytes(RankPoolGeometry(layout, r), num_blocks) for any r).
  int64_t pool_bytes_per_rank = 0;
  UcxOptions ucx;
};

class TransferSource {
 public:
  // INVALID_ARGUMENT for an empty engine id, a layout that ValidateParallelConfig rejects (role
  // prefill) or pool_bytes_per_rank <= 0; UCX failures as ToStatus maps them.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TransferSource>> Create(
      const TransferSourceOptions& options);
  ~TransferSource();
  TransferSource(const TransferSource&) = delete;
  TransferSource& operator=(const TransferSource&) = delete;

  const TransferMetadata& metadata() const { return metadata_; }
  int32_t world() const { return static_cast<int32_t>(ranks_.size()); }
  // REQUIRES: 0 <= rank < world().
  KvPoolMemory& pool(int32_t rank) const;

  // A non-owning view of rank `rank`'s pool, shaped for the engine's KvPoolAllocator:
  //   allocator = [&src](int32_t r, int64_t b) { return src.BorrowPool(r, b); };
  // INVALID_ARGUMENT for a rank outside [0, world()) or more bytes than the pool holds.
  // REQUIRES: this TransferSource outlives the view (the pool stays published to readers).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<KvPoolMemory>> BorrowPool(int32_t rank,
                                                                         int64_t bytes) const;

 private:
  struct Rank;
  TransferSource();

  TransferMetadata metadata_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace tandem
