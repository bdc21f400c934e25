// The pure part of running decode steps as CUDA graphs (docs/gpu.md#cuda-graphs): which batch
// bucket a step is padded to, what a captured piece of a step is keyed by, and a bounded cache
// of captured graphs with least-recently-used eviction and wholesale invalidation.
//
// * Buckets: 1, 2, 4, 8, then every multiple of 8 up to max_batch (rounded up to a multiple of
//   8; below 5 the powers of two up to max_batch rounded up to one) — the ladder vLLM captures.
//   A step of `rows` decode rows runs in the smallest bucket >= rows, padded with rows that read
//   and write nothing (position −1, slot −1); a step above the largest bucket runs eagerly.
// * Pieces: the backend captures the kernels between two attention calls (attention, its
//   metadata upload and its split plan stay eager: "piecewise" graphs). A piece replays fixed
//   kernel launches over fixed addresses, so its key holds everything that fixes a launch or an
//   address: the rows, the activation dtype, the backend's layout generation (bumped whenever a
//   buffer a captured kernel points at is reallocated — backend scratch growth — which
//   invalidates every graph at once), and the piece's signature: a hash over every op's kind,
//   sizes and device pointers in order (PieceSignature). Host metadata values (token ids,
//   positions, gather indices) are not in the key: they are copied into the graph's own
//   fixed-address arena before each replay.
// * Warm-up: a key is captured only after one eager run with it (`NoteEager`), so every
//   grow-only buffer already has its size and nothing allocates or synchronises inside capture.
// * Memory: the cache holds at most max_graphs graphs and max_bytes of their metadata arenas
//   (pinned host + device, counted once each), evicting the least recently replayed. A graph
//   larger than max_bytes by itself is refused (its piece runs eagerly).
//
// The cache stores ids; the CUDA side owns the graph executables and frees the ids the cache
// returns as evicted or invalidated. Thread-safety: none (the backend's thread owns it).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <list>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::gpu {

// INVALID_ARGUMENT for max_batch < 1 or above 4096.
absl::StatusOr<std::vector<int32_t>> DecodeBatchBuckets(int32_t max_batch);

// Smallest bucket >= rows; nullopt for rows < 1 or above the largest bucket (run eagerly).
// buckets: ascending (DecodeBatchBuckets).
std::optional<int32_t> ChooseBucket(absl::Span<const int32_t> buckets, int64_t rows);

// Order-sensitive hash of a piece's ops: each op adds its kind and its integer and pointer
// arguments as words.
class PieceSignature {
 public:
  void Add(std::initializer_list<int64_t> words);
  uint64_t value() const { return hash_; }
  int32_t ops() const { return ops_; }

 private:
  uint64_t hash_ = 0x9e3779b97f4a7c15ull;
  int32_t ops_ = 0;
};

struct DecodeGraphKey {
  int32_t batch_bucket = 0;
  uint8_t activations = 0;  // CudaActivations
  uint64_t layout_generation = 0;
  uint64_t signature = 0;  // PieceSignature::value()

  friend bool operator==(const DecodeGraphKey&, const DecodeGraphKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const DecodeGraphKey& k) {
    return H::combine(std::move(h), k.batch_bucket, k.activations, k.layout_generation,
                      k.signature);
  }
};

class DecodeGraphCache {
 public:
  // REQUIRES: max_graphs >= 1, max_bytes >= 1.
  DecodeGraphCache(int32_t max_graphs, int64_t max_bytes);

  // The id of the graph captured for `key`, marked most recently used; nullopt on a miss.
  std::optional<uint64_t> Find(const DecodeGraphKey& key);

  // Records that a step with `key` ran eagerly; true when the key is now warm (capture it next
  // time it is seen). Keys of an older layout generation never become warm.
  bool NoteEager(const DecodeGraphKey& key);
  // Whether a step with `key` ran eagerly since the last invalidation.
  bool warm(const DecodeGraphKey& key) const { return warm_.contains(key); }

  struct Admission {
    uint64_t id = 0;
    std::vector<uint64_t> evicted;  // ids whose graphs the caller must destroy now
  };
  // Admits a newly captured graph of `bytes` for `key` (which must not be cached), evicting
  // least recently used graphs until both bounds hold. RESOURCE_EXHAUSTED when `bytes` alone
  // exceeds max_bytes; INVALID_ARGUMENT when the key is cached or its generation is stale.
  absl::StatusOr<Admission> Insert(const DecodeGraphKey& key, int64_t bytes);

  // A captured address or grid is no longer valid: drops every graph and warm key and moves to
  // a new layout generation. Returns the ids to destroy.
  std::vector<uint64_t> InvalidateAll();

  uint64_t generation() const { return generation_; }
  int32_t size() const { return static_cast<int32_t>(entries_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    DecodeGraphKey key;
    uint64_t id;
    int64_t bytes;
  };
  const int32_t max_graphs_;
  const int64_t max_bytes_;
  uint64_t generation_ = 0;
  uint64_t next_id_ = 1;
  int64_t bytes_ = 0;
  std::list<Entry> lru_;  // front = most recently used
  absl::flat_hash_map<DecodeGraphKey, std::list<Entry>::iterator> entries_;
  absl::flat_hash_set<DecodeGraphKey> warm_;
};

}  // namespace tandem::gpu
