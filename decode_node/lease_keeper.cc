#include "decode_node/lease_keeper.h"

#include <algorithm>
#include <utility>

namespace tandem {

absl::Time NextLeaseRenewal(absl::Time granted_at, absl::Time expiry, absl::Duration rpc_timeout) {
  const absl::Time half = granted_at + (expiry - granted_at) / 2;
  return std::max(std::min(half, expiry - rpc_timeout), granted_at + kMinRenewInterval);
}

LeaseKeeper::LeaseKeeper(PrefillClient* client, KvHandle kv, absl::Duration rpc_timeout,
                         CancellationToken* on_lost)
    : client_(client),
      kv_(std::move(kv)),
      rpc_timeout_(rpc_timeout),
      on_lost_(on_lost),
      thread_([this] { Loop(); }) {}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool LeaseKeeper::lost() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

int32_t LeaseKeeper::renewals() const {
  absl::MutexLock lock(&mu_);
  return renewals_;
}

void LeaseKeeper::Loop() {
  absl::Time expiry = kv_.lease_expiry;
  absl::Time next = NextLeaseRenewal(absl::Now(), expiry, rpc_timeout_);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), next);
      if (stopping_) return;
    }
    const absl::Time now = absl::Now();
    absl::StatusOr<std::optional<absl::Time>> renewed =
        client_->RenewLease(kv_, now + rpc_timeout_);
    if (renewed.ok() && !renewed->has_value()) {
      {
        absl::MutexLock lock(&mu_);
        lost_ = true;  // before the cancel: whoever it wakes sees lost()
      }
      on_lost_->Cancel();
      return;
    }
    if (renewed.ok()) {
      expiry = **renewed;
      next = NextLeaseRenewal(now, expiry, rpc_timeout_);
      absl::MutexLock lock(&mu_);
      ++renewals_;
    } else {
      const absl::Duration left = std::max(expiry - absl::Now(), absl::ZeroDuration());
      next = absl::Now() + std::max(std::min(rpc_timeout_, left / 4), kMinRenewInterval);
    }
  }
}

}  // namespace tandem
