#include "engine/prefix_cache.h"

#include <algorithm>

#include "common/prefix_hash.h"

namespace tandem {

PrefixCache::PrefixCache(BlockManager* blocks, const PrefixCacheOptions& options)
    : blocks_(blocks), options_(options) {}

PrefixCache::~PrefixCache() {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> held;
  held.reserve(entries_.size());
  for (const auto& [hash, e] : entries_) held.push_back(e.block);
  blocks_->Release(held);
}

std::vector<uint64_t> PrefixCache::Chain(absl::Span<const int32_t> tokens) const {
  return PrefixHashChain(options_.salt, tokens, options_.block_tokens);
}

PrefixCache::Entry* PrefixCache::Match(absl::Span<const int32_t> tokens,
                                       absl::Span<const uint64_t> chain, int64_t i,
                                       uint64_t parent_serial) {
  auto it = entries_.find(chain[static_cast<size_t>(i)]);
  if (it == entries_.end()) return nullptr;
  Entry& e = it->second;
  const absl::Span<const int32_t> want = tokens.subspan(
      static_cast<size_t>(i * options_.block_tokens), static_cast<size_t>(options_.block_tokens));
  if (e.parent_serial != parent_serial ||
      !std::equal(want.begin(), want.end(), e.tokens.begin(), e.tokens.end())) {
    return nullptr;
  }
  return &e;
}

void PrefixCache::Touch(Entry& e) { lru_.splice(lru_.begin(), lru_, e.lru); }

std::vector<int32_t> PrefixCache::Acquire(absl::Span<const int32_t> tokens,
                                          absl::Span<const uint64_t> chain, int64_t max_blocks) {
  const int64_t limit = std::min<int64_t>(max_blocks, static_cast<int64_t>(chain.size()));
  // Matched under the lock and referenced before it is released, so no block can be evicted or
  // reused while its checks are re-read outside the lock (a re-read of a long prefix takes
  // milliseconds, and every other admission waits on this lock).
  std::vector<int32_t> out;
  std::vector<uint64_t> serials;
  std::vector<std::vector<uint32_t>> checks;
  {
    absl::MutexLock lock(&mu_);
    std::vector<Entry*> matched;
    uint64_t parent = 0;
    for (int64_t i = 0; i < limit; ++i) {
      Entry* e = Match(tokens, chain, i, parent);
      if (e == nullptr) break;
      matched.push_back(e);
      out.push_back(e->block);
      serials.push_back(e->serial);
      if (options_.verify) checks.push_back(e->checks);
      parent = e->serial;
    }
    // Deepest first, so the chain's root ends up the most recent.
    for (auto it = matched.rbegin(); it != matched.rend(); ++it) Touch(**it);
    if (!out.empty() && !blocks_->AddRef(out).ok()) {
      // A cached block must hold the cache's reference; anything else is a bookkeeping bug.
      // Reuse nothing rather than KV that may have been handed to someone else.
      return {};
    }
  }
  if (!options_.verify) return out;
  size_t bad = out.size();
  for (size_t i = 0; i < out.size(); ++i) {
    if (!checks[i].empty() && !options_.verify(out[i], checks[i])) {
      bad = i;
      break;
    }
  }
  if (bad == out.size()) return out;
  // Corrupted while cached: drop it and the rest of its chain (their parent is gone), so the
  // prompt computes these tokens again and a later one caches them afresh. Entries replaced
  // meanwhile (another serial) are not ours to drop.
  absl::MutexLock lock(&mu_);
  ++stats_.corrupt_blocks;
  uint64_t parent = bad == 0 ? 0 : serials[bad - 1];
  for (int64_t j = static_cast<int64_t>(bad); j < static_cast<int64_t>(chain.size()); ++j) {
    Entry* next = Match(tokens, chain, j, parent);
    if (next == nullptr || (static_cast<size_t>(j) < serials.size() && next->serial != serials[j]))
      break;
    parent = next->serial;
    Drop(chain[static_cast<size_t>(j)]);
  }
  blocks_->Release(absl::MakeConstSpan(out).subspan(bad));
  out.resize(bad);
  return out;
}

void PrefixCache::Drop(uint64_t hash) {
  auto e = entries_.find(hash);
  const int32_t block = e->second.block;
  lru_.erase(e->second.lru);
  hash_of_block_.erase(block);
  entries_.erase(e);
  blocks_->Release({&block, 1});
}

int32_t PrefixCache::Evict(int32_t count, bool all_or_nothing) {
  std::vector<std::list<uint64_t>::iterator> victims;
  for (auto it = lru_.end(); it != lru_.begin() && static_cast<int32_t>(victims.size()) < count;) {
    --it;
    if (blocks_->RefCount(entries_.at(*it).block) == 1) victims.push_back(it);
  }
  if (all_or_nothing && static_cast<int32_t>(victims.size()) < count) return 0;
  std::vector<int32_t> freed;
  for (auto it : victims) {
    auto e = entries_.find(*it);
    freed.push_back(e->second.block);
    hash_of_block_.erase(e->second.block);
    entries_.erase(e);
    lru_.erase(it);
  }
  blocks_->Release(freed);
  stats_.evictions += static_cast<int64_t>(freed.size());
  return static_cast<int32_t>(freed.size());
}

absl::StatusOr<std::vector<int32_t>> PrefixCache::Allocate(int32_t count) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<int32_t>> got = blocks_->Allocate(count);
  if (got.ok() || !absl::IsResourceExhausted(got.status())) return got;
  const int32_t short_by = count - blocks_->free_blocks();
  if (short_by <= 0 || Evict(short_by, /*all_or_nothing=*/true) == 0) return got;
  return blocks_->Allocate(count);
}

void PrefixCache::Insert(absl::Span<const int32_t> tokens, absl::Span<const uint64_t> chain,
                         absl::Span<const int32_t> table) {
  const int64_t full =
      std::min<int64_t>(static_cast<int64_t>(chain.size()), static_cast<int64_t>(table.size()));
  absl::MutexLock lock(&mu_);
  std::vector<Entry*> path;
  uint64_t parent = 0;
  for (int64_t i = 0; i < full; ++i) {
    const uint64_t hash = chain[static_cast<size_t>(i)];
    Entry* e = Match(tokens, chain, i, parent);
    if (e == nullptr) {
      if (entries_.contains(hash)) break;  // a collision, or a chain with another parent
      if (options_.max_blocks > 0 && static_cast<int64_t>(entries_.size()) >= options_.max_blocks &&
          Evict(1, /*all_or_nothing=*/true) == 0) {
        break;
      }
      const int32_t block = table[static_cast<size_t>(i)];
      // Not allocated: the caller's table is wrong. Cache nothing from it.
      if (!blocks_->AddRef({&block, 1}).ok()) break;
      Entry fresh;
      fresh.block = block;
      fresh.serial = next_serial_++;
      fresh.parent_serial = parent;
      const auto begin = tokens.begin() + i * options_.block_tokens;
      fresh.tokens.assign(begin, begin + options_.block_tokens);
      lru_.push_front(hash);
      fresh.lru = lru_.begin();
      hash_of_block_[block] = hash;
      e = &entries_.emplace(hash, std::move(fresh)).first->second;
    }
    path.push_back(e);
    parent = e->serial;
  }
  for (auto it = path.rbegin(); it != path.rend(); ++it) Touch(**it);
}

void PrefixCache::RecordChecks(absl::Span<const int32_t> table,
                               absl::Span<const std::vector<uint32_t>> checks) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < table.size() && i < checks.size(); ++i) {
    if (checks[i].empty()) continue;
    const auto h = hash_of_block_.find(table[i]);
    if (h == hash_of_block_.end()) continue;
    Entry& e = entries_.at(h->second);
    if (e.checks.empty()) e.checks = checks[i];
  }
}

std::vector<std::vector<uint32_t>> PrefixCache::Checks(absl::Span<const int32_t> table) const {
  std::vector<std::vector<uint32_t>> out(table.size());
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < table.size(); ++i) {
    const auto h = hash_of_block_.find(table[i]);
    if (h != hash_of_block_.end()) out[i] = entries_.at(h->second).checks;
  }
  return out;
}

void PrefixCache::RecordLookup(int64_t prompt_tokens, int64_t hit_tokens) {
  absl::MutexLock lock(&mu_);
  stats_.query_tokens += prompt_tokens;
  stats_.hit_tokens += hit_tokens;
}

int32_t PrefixCache::evictable_blocks() const {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> held;
  held.reserve(entries_.size());
  for (const auto& [hash, e] : entries_) held.push_back(e.block);
  return blocks_->CountSoleReferences(held);
}

int32_t PrefixCache::free_blocks() const {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> held;
  held.reserve(entries_.size());
  for (const auto& [hash, e] : entries_) held.push_back(e.block);
  return blocks_->free_blocks() + blocks_->CountSoleReferences(held);
}

PrefixCacheStats PrefixCache::stats() const {
  absl::MutexLock lock(&mu_);
  PrefixCacheStats s = stats_;
  s.blocks = static_cast<int64_t>(entries_.size());
  return s;
}

PrefixCacheDigestView PrefixCache::Digest(int32_t max_hashes) const {
  PrefixCacheDigestView d;
  d.salt = options_.salt;
  d.block_tokens = options_.block_tokens;
  absl::MutexLock lock(&mu_);
  for (uint64_t hash : lru_) {
    if (static_cast<int32_t>(d.block_hashes.size()) >= max_hashes) {
      d.truncated = true;
      break;
    }
    d.block_hashes.push_back(hash);
  }
  return d;
}

}  // namespace tandem
