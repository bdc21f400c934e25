// Polls every node's Status RPC (PrefillService.Status or DecodeService.Status) each interval,
// all nodes concurrently, each poll with a deadline, and reports the results to the NodePool
// (health + load for least_loaded). Heartbeat nodes whose ttl ran out are dropped first.
// PollNow() starts a round at once (used when a node registers).
//
// Thread-safety: all methods are thread-safe. The destructor stops the thread (after the round
// in progress, which its deadlines bound).
#pragma once

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/node_pool.h"

namespace tandem {

class HealthChecker {
 public:
  static constexpr absl::Duration kDefaultRecoveryInterval = absl::Milliseconds(200);

  // Starts polling at once. `poll_timeout` is each Status call's deadline. While some node is
  // unhealthy, rounds start every `recovery_interval` instead (when shorter than `interval`), so
  // a node that comes back is healthy again within recovery_interval + one poll.
  HealthChecker(NodePool* pool, absl::Duration interval, absl::Duration poll_timeout,
                absl::Duration recovery_interval = kDefaultRecoveryInterval);
  ~HealthChecker();
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  void PollNow();

 private:
  void Loop();
  void PollOnce();

  NodePool* const pool_;
  const absl::Duration interval_;
  const absl::Duration poll_timeout_;
  const absl::Duration recovery_interval_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tandem
