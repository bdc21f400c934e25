// KV leases of a prefill instance (docs/design.md#lease-protocol). Pure; not thread-safe (the node
// locks it).
//
// A lease holds a request's KV blocks until the decode side releases them or the lease expires.
// Each lease has a generation, unique for the table's lifetime: ReleaseKv / RenewLease quote it,
// so a decode that took too long can never free or extend blocks that were re-allocated to
// another request. Release reports whether the lease was still held — if it had expired the
// blocks may have been overwritten during the transfer and the decode side must discard them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tandem {

class LeaseTable {
 public:
  // Returns the new lease's generation.
  uint64_t Add(std::string request_id, std::vector<int32_t> blocks, absl::Time expiry);

  // The lease's blocks if (generation, request_id) is held; the lease is removed. nullopt when
  // it expired or never existed.
  std::optional<std::vector<int32_t>> Release(const std::string& request_id, uint64_t generation);

  // Removes every lease of `request_id` (whatever its generation) and returns their blocks;
  // empty when it holds none. For a release by request id (ReleaseKvRequest.generation 0).
  std::vector<std::vector<int32_t>> ReleaseRequest(const std::string& request_id);

  // New expiry if held, nullopt otherwise.
  std::optional<absl::Time> Renew(const std::string& request_id, uint64_t generation,
                                  absl::Time expiry);

  // Removes and returns the blocks of every lease with expiry <= now.
  std::vector<std::vector<int32_t>> TakeExpired(absl::Time now);

  // Whether the lease of `generation` is held.
  bool Holds(uint64_t generation) const { return leases_.contains(generation); }
  // The blocks of the lease of `generation`; empty when it is not held.
  std::vector<int32_t> Blocks(uint64_t generation) const;

  // Earliest expiry, or InfiniteFuture when empty.
  absl::Time NextExpiry() const;
  int32_t size() const { return static_cast<int32_t>(leases_.size()); }

 private:
  struct Lease {
    std::string request_id;
    std::vector<int32_t> blocks;
    absl::Time expiry;
  };
  uint64_t next_generation_ = 1;
  std::map<uint64_t, Lease> leases_;  // by generation
};

}  // namespace tandem
