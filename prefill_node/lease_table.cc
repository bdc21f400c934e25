#include "prefill_node/lease_table.h"

namespace tandem {

uint64_t LeaseTable::Add(std::string request_id, std::vector<int32_t> blocks, absl::Time expiry) {
  const uint64_t gen = next_generation_++;
  leases_.emplace(gen, Lease{std::move(request_id), std::move(blocks), expiry});
  return gen;
}

std::optional<std::vector<int32_t>> LeaseTable::Release(const std::string& request_id,
                                                        uint64_t generation) {
  auto it = leases_.find(generation);
  if (it == leases_.end() || it->second.request_id != request_id) return std::nullopt;
  std::vector<int32_t> blocks = std::move(it->second.blocks);
  leases_.erase(it);
  return blocks;
}

std::vector<std::vector<int32_t>> LeaseTable::ReleaseRequest(const std::string& request_id) {
  // A linear scan: the table holds the leases of prompts awaiting their decode, a few hundred at
  // most, and a release by request id is rare (a Prefill call the router gave up on).
  std::vector<std::vector<int32_t>> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.request_id == request_id) {
      out.push_back(std::move(it->second.blocks));
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::optional<absl::Time> LeaseTable::Renew(const std::string& request_id, uint64_t generation,
                                            absl::Time expiry) {
  auto it = leases_.find(generation);
  if (it == leases_.end() || it->second.request_id != request_id) return std::nullopt;
  it->second.expiry = std::max(it->second.expiry, expiry);
  return it->second.expiry;
}

std::vector<std::vector<int32_t>> LeaseTable::TakeExpired(absl::Time now) {
  std::vector<std::vector<int32_t>> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expiry <= now) {
      out.push_back(std::move(it->second.blocks));
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

absl::Time LeaseTable::NextExpiry() const {
  absl::Time t = absl::InfiniteFuture();
  for (const auto& [gen, lease] : leases_) t = std::min(t, lease.expiry);
  return t;
}

std::vector<int32_t> LeaseTable::Blocks(uint64_t generation) const {
  const auto it = leases_.find(generation);
  return it == leases_.end() ? std::vector<int32_t>() : it->second.blocks;
}

}  // namespace tandem
