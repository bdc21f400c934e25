#include "prefill_node/early_releases.h"

namespace tandem {

EarlyReleases::EarlyReleases(size_t capacity, absl::Duration ttl)
    : capacity_(capacity), ttl_(ttl) {}

void EarlyReleases::Forget(const Entry& entry) {
  // An id remembered again has a newer entry: only the latest one speaks for it.
  const auto it = ids_.find(entry.request_id);
  if (it != ids_.end() && it->second == entry.seq) ids_.erase(it);
}

void EarlyReleases::Expire(absl::Time now) {
  while (!order_.empty() && order_.front().expiry <= now) {
    Forget(order_.front());
    order_.pop_front();
  }
}

void EarlyReleases::Remember(const std::string& request_id, absl::Time now) {
  Expire(now);
  while (order_.size() >= capacity_) {
    Forget(order_.front());
    order_.pop_front();
  }
  const uint64_t seq = next_seq_++;
  ids_[request_id] = seq;
  order_.push_back(Entry{request_id, seq, now + ttl_});
}

bool EarlyReleases::Take(const std::string& request_id, absl::Time now) {
  Expire(now);
  // Its queue entry stays until it expires or is pushed out; Forget then finds no match.
  return ids_.erase(request_id) > 0;
}

}  // namespace tandem
