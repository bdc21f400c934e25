// Prefix cache of a prefill instance (issue 18): full virtual KV blocks kept after their prompt's
// prefill, indexed by the hash chain of their token ids (common/prefix_hash.h), and handed to
// later prompts that start with the same tokens so that only the uncached suffix is computed.
// Pure: std + abseil + engine_core.
//
// Granularity: one entry is one *virtual* block (docs/design.md#token-ownership: B·dcp tokens,
// DCP-sharded across the ranks of every DCP group at the same block id), so `block_tokens` = B·dcp.
// A block's KV depends on every token before it (attention, RoPE position), which the chain covers.
//
// Ownership: the cache holds one BlockManager reference on each cached block. A request that
// reuses cached blocks takes its own reference through Acquire (under the cache's lock), so a
// block is evictable exactly when the cache's reference is the only one left — a block that is
// leased, or part of a running prefill, is never evicted. Only Acquire adds references to cached
// blocks, and it holds the cache's lock, so "refcount 1" cannot change under an eviction.
//
// Exactness: a hash is a lookup key, not a proof. Each entry stores its block's token ids and the
// serial number of the entry it was computed after (its parent); Acquire reuses block i only if
// its tokens equal the prompt's and its parent is the entry it just matched for block i − 1, so a
// matched chain is exactly a sequence of blocks computed one after the other for these tokens.
//
// Eviction: least recently used first, when an allocation would fail (Allocate) or when the cache
// is over its own limit (max_blocks). Lookups and inserts touch a chain's entries deepest first,
// so a parent is always more recent than its children and chains are trimmed from the tail.
//
// Integrity (issue 28): a block's KV bytes can be corrupted while it sits in the cache. The node
// records each cached block's checks (kv_transfer/kv_digest.h KvBlockChecks, computed when the
// block was first written) with RecordChecks; Acquire re-reads the matched blocks through
// options.verify — outside the cache's lock, holding its own references, so a long prefix's
// re-read does not stall other admissions — and, on a mismatch, drops it and the rest of its chain
// and reuses nothing from there on (the prompt computes those tokens again), counting
// corrupt_blocks. Checks(table) hands the recorded checks back, so a hit's digests bind to them
// rather than to the bytes.
//
// Thread-safe. Lock order: the cache's mutex, then BlockManager's.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/block_manager.h"

namespace tandem {

struct PrefixCacheOptions {
  uint64_t salt = 0;         // PrefixSalt(model, KV layout, dtype): see prefill_node
  int64_t block_tokens = 0;  // tokens per cached block: B·dcp (> 0)
  int64_t max_blocks = 0;    // cap on cached blocks; 0 = bounded by the pool only
  // Whether cached block `block`'s bytes still give `checks` (recorded by RecordChecks). Null:
  // hits are not re-verified. Called under the cache's lock; must not call into the cache.
  std::function<bool(int32_t block, absl::Span<const uint32_t> checks)> verify;
};

// Cumulative counters and the current size, for metrics and Status.
struct PrefixCacheStats {
  int64_t query_tokens = 0;    // prompt tokens of admitted requests (looked up)
  int64_t hit_tokens = 0;      // of those, tokens whose KV came from the cache
  int64_t evictions = 0;       // blocks evicted
  int64_t blocks = 0;          // blocks cached now
  int64_t corrupt_blocks = 0;  // matched blocks whose bytes no longer gave their checks
};

// The cached blocks' hashes, most recently used first (PrefixCacheDigest in common.proto).
struct PrefixCacheDigestView {
  uint64_t salt = 0;
  int64_t block_tokens = 0;
  std::vector<uint64_t> block_hashes;
  bool truncated = false;
};

class PrefixCache {
 public:
  // REQUIRES: blocks outlives the cache; options.block_tokens > 0.
  PrefixCache(BlockManager* blocks, const PrefixCacheOptions& options);
  // Drops the cache's reference on every cached block.
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  int64_t block_tokens() const { return options_.block_tokens; }
  uint64_t salt() const { return options_.salt; }

  // PrefixHashChain(salt, tokens, block_tokens): one hash per full block.
  std::vector<uint64_t> Chain(absl::Span<const int32_t> tokens) const;

  // The blocks of the longest cached, verified prefix of `tokens`, at most `max_blocks` of them,
  // in order, each with one reference added for the caller (release them with BlockManager::Free
  // or Release). `chain` is Chain(tokens). Touches the matched entries.
  std::vector<int32_t> Acquire(absl::Span<const int32_t> tokens, absl::Span<const uint64_t> chain,
                               int64_t max_blocks);

  // BlockManager::Allocate, evicting least recently used blocks that only the cache holds when the
  // pool is short. RESOURCE_EXHAUSTED (nothing evicted) if even that would not be enough.
  absl::StatusOr<std::vector<int32_t>> Allocate(int32_t count);

  // After a successful prefill of `tokens` whose KV is in `table` (virtual block i holds positions
  // [i·block_tokens, (i+1)·block_tokens)): caches each full block not cached yet, taking a
  // reference on it. A block whose hash is cached with other tokens or another parent (a
  // collision) ends the insert there. `chain` is Chain(tokens).
  void Insert(absl::Span<const int32_t> tokens, absl::Span<const uint64_t> chain,
              absl::Span<const int32_t> table);

  // Records the checks of the cached blocks among `table` that have none yet (the first write's):
  // checks[i] belongs to table[i]; empty entries are skipped.
  void RecordChecks(absl::Span<const int32_t> table,
                    absl::Span<const std::vector<uint32_t>> checks);

  // The recorded checks of each block of `table` that is cached with checks (empty otherwise).
  std::vector<std::vector<uint32_t>> Checks(absl::Span<const int32_t> table) const;

  // Counts an admitted request: `prompt_tokens` looked up, `hit_tokens` of them reused.
  void RecordLookup(int64_t prompt_tokens, int64_t hit_tokens);

  // Cached blocks nobody but the cache holds (reclaimable, so nodes report them as free).
  int32_t evictable_blocks() const;
  // BlockManager's free blocks + evictable_blocks(), read while no allocation or eviction can run
  // (never more than the pool holds).
  int32_t free_blocks() const;
  PrefixCacheStats stats() const;
  // At most `max_hashes` hashes, most recently used first.
  PrefixCacheDigestView Digest(int32_t max_hashes) const;

 private:
  struct Entry {
    int32_t block = -1;
    uint64_t serial = 0;         // unique for the cache's lifetime (0 = "no parent")
    uint64_t parent_serial = 0;  // the entry of the previous block; 0 for the first block
    std::vector<int32_t> tokens;
    std::vector<uint32_t> checks;       // KvBlockChecks of the first write; empty until recorded
    std::list<uint64_t>::iterator lru;  // position in lru_ (front = most recent)
  };
  // Verified entry for block i of `tokens` whose parent is `parent_serial`, or nullptr.
  Entry* Match(absl::Span<const int32_t> tokens, absl::Span<const uint64_t> chain, int64_t i,
               uint64_t parent_serial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the entry at `hash` and releases the cache's reference on its block.
  void Drop(uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts up to `count` least recently used entries only the cache holds; returns how many.
  // With all_or_nothing, evicts nothing unless `count` can be evicted.
  int32_t Evict(int32_t count, bool all_or_nothing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  BlockManager* const blocks_;
  const PrefixCacheOptions options_;

  mutable absl::Mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by block hash
  std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);                      // hashes, most recent first
  std::unordered_map<int32_t, uint64_t> hash_of_block_ ABSL_GUARDED_BY(mu_);
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 1;
  PrefixCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
