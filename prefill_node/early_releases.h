// Request ids whose KV was released (ReleaseKv by request id, generation 0) while their prefill
// was still running on this prefill instance. The router sends such a release after it gave up on
// a Prefill call whose answer may still be on its way (client cancel, deadline): the lease that
// prefill takes when it finishes belongs to nobody, so the instance releases it at once instead
// of holding the blocks until the lease expires (docs/RELIABILITY.md, "Soak"). The node takes the
// id out when that prefill ends, whatever its outcome.
//
// Bounded: at most `capacity` ids, each forgotten `ttl` after it was remembered, the oldest
// first when full. Pure; not thread-safe (the node locks it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace tandem {

class EarlyReleases {
 public:
  // REQUIRES: capacity >= 1, ttl > 0.
  EarlyReleases(size_t capacity, absl::Duration ttl);

  // Remembers `request_id` until now + ttl (again: from now on).
  void Remember(const std::string& request_id, absl::Time now);
  // True when `request_id` is remembered and its ttl has not passed at `now`; it is forgotten
  // either way (one release answers one lease).
  bool Take(const std::string& request_id, absl::Time now);
  // Ids remembered and not yet forgotten (expired ones are forgotten by the next call).
  size_t size() const { return ids_.size(); }

 private:
  struct Entry {
    std::string request_id;
    uint64_t seq;  // of the Remember that queued it
    absl::Time expiry;
  };
  void Forget(const Entry& entry);
  void Expire(absl::Time now);

  const size_t capacity_;
  const absl::Duration ttl_;
  uint64_t next_seq_ = 0;
  std::deque<Entry> order_;                         // by Remember time (= by expiry)
  absl::flat_hash_map<std::string, uint64_t> ids_;  // id -> seq of its latest Remember
};

}  // namespace tandem
