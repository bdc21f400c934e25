// LeaseKeeper: keeps a prefill instance's lease on one prompt's KV alive while a decode call
// waits for capacity and pulls (docs/design.md#lease-protocol), however long the pull takes.
//
// A thread renews the lease through the PrefillClient on NextLeaseRenewal's schedule: when half
// of what the last grant left has passed, and at least one rpc_timeout before the expiry (each
// renewal call is itself bounded by rpc_timeout), never more often than kMinRenewInterval. A
// renewal answered "not held" means the lease is gone: lost() turns true and *on_lost is
// cancelled (the pull's token), so a pull that can no longer succeed stops at once. A renewal call
// that fails is retried after min(rpc_timeout, a quarter of what is left); the final ReleaseKv
// decides whether the lease held.
//
// Ownership: borrows the client and on_lost, which must outlive it. Stop() (or destruction)
// joins the thread, waiting at most for one renewal call in flight (≤ rpc_timeout).
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "decode_node/prefill_client.h"

namespace tandem {

inline constexpr absl::Duration kMinRenewInterval = absl::Milliseconds(10);

// When to renew a lease granted at `granted_at` until `expiry`. Pure.
absl::Time NextLeaseRenewal(absl::Time granted_at, absl::Time expiry, absl::Duration rpc_timeout);

class LeaseKeeper {
 public:
  LeaseKeeper(PrefillClient* client, KvHandle kv, absl::Duration rpc_timeout,
              CancellationToken* on_lost);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void Stop();
  bool lost() const;
  int32_t renewals() const;  // successful renewals so far

 private:
  void Loop();

  PrefillClient* const client_;
  const KvHandle kv_;
  const absl::Duration rpc_timeout_;
  CancellationToken* const on_lost_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  int32_t renewals_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts after every member above is initialised
};

}  // namespace tandem
