// How long the router waits between a request's node attempts, and how long a request may wait
// for a node of a role to become healthy (issue 19: a short network outage must not fail
// requests whose deadline outlasts it). Pure.
//
//   * After the n-th retryable failure (n >= 1) the next attempt starts after
//     BackoffDelay(n) = min(initial * 2^(n-1), max) -- 100 ms, 200 ms, 400 ms, ... 2 s by default.
//   * When no node of the needed role is healthy, the request waits for one until
//     WaitDeadline(): the earlier of the client's deadline and `budget` after the wait began.
//     Waiting costs no attempt; `max_attempts` still counts failed calls.
//   * The health checker polls every `interval` while every node is healthy and every
//     `recovery_interval` while some node is not (HealthPollDelay), so a node that comes back is
//     seen within recovery_interval + one poll; a node is marked unhealthy at its first failed
//     poll or failed call, and healthy at its first successful poll (node_pool.h).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem {

struct RetryPolicy {
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // Longest a request waits for a healthy node of a role, per wait.
  absl::Duration wait_budget = absl::Seconds(60);
};

// REQUIRES: failures >= 1.
absl::Duration BackoffDelay(const RetryPolicy& policy, int failures);

// When a wait for a healthy node that begins at `now` must give up.
absl::Time WaitDeadline(const RetryPolicy& policy, absl::Time now, absl::Time client_deadline);

// When the next attempt after `failures` failures may start, never later than the deadline.
absl::Time NextAttemptAt(const RetryPolicy& policy, int failures, absl::Time now,
                         absl::Time client_deadline);

// True when a decode node's error is about the prefill node its KV comes from rather than about
// itself: the status carries a KvSourceFailure (common/kv_source_failure.h, attached where the
// decode node detected the failure) naming this source by address or by engine id. The router
// then blames (and retries away from) the prefill node, not the decode node. The message text is
// never read: rewording an error does not change whom the router blames.
bool BlamesPrefillSource(const absl::Status& decode_error, absl::string_view prefill_address,
                         absl::string_view engine_id);

// True when a Prefill call that ended with `code` (at the router) may have left a lease on the
// prefill node that nobody holds a KvHandle for, so the router should release it by request id:
// the router cancelled the call (`router_cancelled`: the client went away, a stop string, a
// shutdown) or it ended CANCELLED or DEADLINE_EXCEEDED — the node may have finished and answered
// just as the call ended. Otherwise no: a node that answered with an error took no lease, and
// one that cannot be reached (UNAVAILABLE) cannot be told either (a lease it holds expires).
bool PrefillMayHaveLeased(absl::StatusCode code, bool router_cancelled);

// Delay before the health checker's next round.
absl::Duration HealthPollDelay(absl::Duration interval, absl::Duration recovery_interval,
                               bool all_healthy);

}  // namespace tandem
