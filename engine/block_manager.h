// Allocation of virtual KV blocks for one instance (docs/design.md#token-ownership). Pure.
//
// A virtual block holds B·dcp tokens: B tokens on each rank of a DCP group, at the same block id
// in every rank's pool (and every DCP group of the instance uses the same ids). Blocks are
// reference-counted so a table can be shared (e.g. by a prompt cache); Free drops one reference.
// Allocation hands out the lowest free ids first, which keeps a request's blocks in long runs of
// consecutive ids — the KV transfer coalesces such runs into single copies.
//
// Generation fencing (docs/kv_transfer.md "Provable KV"): every block carries a generation that
// bumps each time its last reference is dropped (it starts at 0 and wraps at 2^32). A holder
// that recorded Generations(blocks) can later ask FreedSince which of them were freed in between
// — even if the bookkeeping that should have kept them allocated was wrong — since a block can
// be reused (and overwritten) only after a free, and every free bumps it.
//
// Thread-safe; AwaitFree blocks.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cancellation.h"

namespace tandem {

class BlockManager {
 public:
  explicit BlockManager(int32_t num_blocks);

  // `count` new blocks with refcount 1, or RESOURCE_EXHAUSTED (nothing allocated).
  absl::StatusOr<std::vector<int32_t>> Allocate(int32_t count);
  // Appends blocks to `table` until it has `total` entries (no-op if it already has).
  absl::Status Extend(std::vector<int32_t>* table, int32_t total);
  // Drops one reference of each block; INVALID_ARGUMENT (and no change) if any id is not
  // allocated or out of range. A failure is a bookkeeping bug somewhere: it is also counted
  // (free_errors()) and written to stderr, so callers on cleanup paths lose nothing.
  absl::Status Free(absl::Span<const int32_t> blocks);
  // Free for cleanup paths that cannot act on a failure (Free has counted and logged it).
  void Release(absl::Span<const int32_t> blocks);
  absl::Status AddRef(absl::Span<const int32_t> blocks);

  // The current generation of each block (allocated or not); INVALID_ARGUMENT for an id out of
  // range.
  absl::StatusOr<std::vector<uint32_t>> Generations(absl::Span<const int32_t> blocks) const;
  // The blocks freed since `generations` (parallel to `blocks`) were recorded: those whose
  // generation moved, in list order; empty when none was. INVALID_ARGUMENT for lists of
  // different lengths or an id out of range.
  absl::StatusOr<std::vector<int32_t>> FreedSince(absl::Span<const int32_t> blocks,
                                                  absl::Span<const uint32_t> generations) const;

  // Blocks until at least `count` blocks are free, `deadline` passes or `stop` (may be null) is
  // cancelled; whether `count` blocks are free when it returns. The Free that frees them wakes
  // it at once (the wait is a condition on the free list, not a poll). Another thread may take
  // them first: callers Allocate after it and wait again when that fails.
  bool AwaitFree(int32_t count, absl::Time deadline, const CancellationToken* stop = nullptr) const;

  int32_t total_blocks() const { return num_blocks_; }
  int32_t free_blocks() const;
  // References held on `block` now (0: free or out of range).
  int32_t RefCount(int32_t block) const;
  // How many of `blocks` have exactly one reference (e.g. cached blocks no request holds).
  int32_t CountSoleReferences(absl::Span<const int32_t> blocks) const;
  // Failed Free calls since construction; nodes report it in their Status (block_free_errors).
  int64_t free_errors() const;

 private:
  // releasing: also require each id to appear at most refcount times.
  absl::Status CheckAllocated(absl::Span<const int32_t> blocks, bool releasing) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t num_blocks_;
  mutable absl::Mutex mu_;
  std::set<int32_t> free_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> refcount_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> generation_ ABSL_GUARDED_BY(mu_);
  int64_t free_errors_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem
