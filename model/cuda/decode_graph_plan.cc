#include "model/cuda/decode_graph_plan.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace tandem::gpu {

absl::StatusOr<std::vector<int32_t>> DecodeBatchBuckets(int32_t max_batch) {
  if (max_batch < 1 || max_batch > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode graphs: max_batch = ", max_batch, " is outside [1, 4096]"));
  }
  std::vector<int32_t> b;
  for (int32_t v : {1, 2, 4}) {
    if (v < max_batch) b.push_back(v);
  }
  if (max_batch <= 4) {
    b.push_back(max_batch == 3 ? 4 : max_batch);
    return b;
  }
  const int32_t top = (max_batch + 7) / 8 * 8;
  for (int32_t v = 8; v <= top; v += 8) b.push_back(v);
  return b;
}

std::optional<int32_t> ChooseBucket(absl::Span<const int32_t> buckets, int64_t rows) {
  if (rows < 1) return std::nullopt;
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), rows,
                                   [](int32_t b, int64_t r) { return int64_t{b} < r; });
  if (it == buckets.end()) return std::nullopt;
  return *it;
}

void PieceSignature::Add(std::initializer_list<int64_t> words) {
  hash_ = absl::HashOf(hash_, ops_, words.size());
  for (int64_t w : words) hash_ = absl::HashOf(hash_, w);
  ++ops_;
}

DecodeGraphCache::DecodeGraphCache(int32_t max_graphs, int64_t max_bytes)
    : max_graphs_(std::max(max_graphs, 1)), max_bytes_(std::max<int64_t>(max_bytes, 1)) {}

std::optional<uint64_t> DecodeGraphCache::Find(const DecodeGraphKey& key) {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->id;
}

bool DecodeGraphCache::NoteEager(const DecodeGraphKey& key) {
  if (key.layout_generation != generation_) return false;
  warm_.insert(key);
  return true;
}

absl::StatusOr<DecodeGraphCache::Admission> DecodeGraphCache::Insert(const DecodeGraphKey& key,
                                                                     int64_t bytes) {
  if (key.layout_generation != generation_) {
    return absl::InvalidArgumentError(absl::StrCat("decode graphs: key of layout generation ",
                                                   key.layout_generation, ", current is ",
                                                   generation_));
  }
  if (entries_.contains(key)) {
    return absl::InvalidArgumentError(absl::StrCat("decode graphs: rows ", key.batch_bucket,
                                                   " / signature ", key.signature,
                                                   " is already captured"));
  }
  if (bytes < 0 || bytes > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("decode graphs: a graph of ", bytes,
                                                     " bytes exceeds the budget of ", max_bytes_));
  }
  Admission a;
  while (!lru_.empty() &&
         (static_cast<int32_t>(lru_.size()) + 1 > max_graphs_ || bytes_ + bytes > max_bytes_)) {
    const Entry& victim = lru_.back();
    a.evicted.push_back(victim.id);
    bytes_ -= victim.bytes;
    entries_.erase(victim.key);
    lru_.pop_back();
  }
  a.id = next_id_++;
  lru_.push_front(Entry{key, a.id, bytes});
  entries_[key] = lru_.begin();
  bytes_ += bytes;
  return a;
}

std::vector<uint64_t> DecodeGraphCache::InvalidateAll() {
  std::vector<uint64_t> ids;
  for (const Entry& e : lru_) ids.push_back(e.id);
  lru_.clear();
  entries_.clear();
  warm_.clear();
  bytes_ = 0;
  ++generation_;
  return ids;
}

}  // namespace tandem::gpu
