// What KV-aware routing knows about prefill instances' prefix caches (pure: no gRPC, no I/O).
//
// A prefill instance with a prefix cache publishes a digest in its Status (InstanceStatus.
// prefix_cache: salt, block_tokens, the hashes of the blocks it holds, most recently used first,
// capped). The router keeps each digest as a PrefixDigest -- a hash set, rebuilt from every
// poll -- and hashes a request's prompt the same way (common/prefix_hash.h) to count how many of
// the prompt's leading blocks a node holds. The hashes are a hint: the node verifies token ids
// before it reuses a block, so a stale or colliding digest costs only a worse choice.
//
// Thread-safety: PrefixDigest is immutable once built (shared between threads through
// shared_ptr<const>). PromptPrefixHashes belongs to one request and RecentBlocks to one node
// entry of the node pool (under its lock); neither is thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tandem {

struct PrefixDigest {
  uint64_t salt = 0;
  int64_t block_tokens = 0;  // > 0
  absl::flat_hash_set<uint64_t> blocks;
  bool truncated = false;  // the node holds more blocks than it listed
};

// The prompt's hash chains, computed once per distinct (salt, block_tokens) however many nodes
// (and retries) ask: nodes of one model and layout share both, so a request normally hashes its
// prompt once. `prompt` must outlive this object.
class PromptPrefixHashes {
 public:
  explicit PromptPrefixHashes(absl::Span<const int32_t> prompt) : prompt_(prompt) {}
  PromptPrefixHashes(const PromptPrefixHashes&) = delete;
  PromptPrefixHashes& operator=(const PromptPrefixHashes&) = delete;

  int64_t prompt_tokens() const { return static_cast<int64_t>(prompt_.size()); }
  // Hashes of the prompt's full blocks (PrefixHashChain). Empty when block_tokens <= 0.
  absl::Span<const uint64_t> Chain(uint64_t salt, int64_t block_tokens);
  // How many chains were computed so far (each distinct key once).
  int chains_computed() const { return static_cast<int>(chains_.size()); }

 private:
  absl::Span<const int32_t> prompt_;
  absl::flat_hash_map<std::pair<uint64_t, int64_t>, std::vector<uint64_t>> chains_;
};

// Blocks this router just had a node prefill (hashed with that node's digest parameters), which
// the node's next digest will list: without them a burst of requests sharing a new prefix would
// spread over the fleet until the next Status poll. Entries are forgotten once a poll that
// started after them has answered (its digest then speaks for them, evicted or not).
class RecentBlocks {
 public:
  void Add(absl::Span<const uint64_t> chain, absl::Time at);
  // Drops the blocks added before `t` (the start of a poll that just answered).
  void ForgetBefore(absl::Time t);
  void Clear() { blocks_.clear(); }
  bool contains(uint64_t hash) const { return blocks_.contains(hash); }
  size_t size() const { return blocks_.size(); }

 private:
  absl::flat_hash_map<uint64_t, absl::Time> blocks_;  // hash -> when it was last added
};

// Tokens of the prompt's longest prefix whose blocks are all held -- in `digest` or in `recent`
// (may be null): the number of leading chain hashes present, times block_tokens. A prefill
// instance always computes the prompt's last token (its logits give the first token), so the
// block holding it does not count: at most (prompt_tokens - 1) / block_tokens blocks.
[[nodiscard]] int64_t CachedPrefixTokens(const PrefixDigest& digest, PromptPrefixHashes& prompt,
                                         const RecentBlocks* recent = nullptr);

}  // namespace tandem
