#include "router/retry_policy.h"

#include <algorithm>
#include <optional>

#include "common/kv_source_failure.h"

namespace tandem {

absl::Duration BackoffDelay(const RetryPolicy& policy, int failures) {
  absl::Duration delay = policy.initial_backoff;
  for (int i = 1; i < failures && delay < policy.max_backoff; ++i) delay *= 2;
  return std::min(delay, policy.max_backoff);
}

absl::Time WaitDeadline(const RetryPolicy& policy, absl::Time now, absl::Time client_deadline) {
  return std::min(client_deadline, now + policy.wait_budget);
}

absl::Time NextAttemptAt(const RetryPolicy& policy, int failures, absl::Time now,
                         absl::Time client_deadline) {
  return std::min(client_deadline, now + BackoffDelay(policy, failures));
}

bool BlamesPrefillSource(const absl::Status& decode_error, absl::string_view prefill_address,
                         absl::string_view engine_id) {
  const std::optional<KvSourceFailure> source = KvSourceFailureOf(decode_error);
  if (!source.has_value()) return false;
  return (!prefill_address.empty() && source->prefill_address == prefill_address) ||
         (!engine_id.empty() && source->engine_id == engine_id);
}

absl::Duration HealthPollDelay(absl::Duration interval, absl::Duration recovery_interval,
                               bool all_healthy) {
  return all_healthy ? interval : std::min(interval, recovery_interval);
}

bool PrefillMayHaveLeased(absl::StatusCode code, bool router_cancelled) {
  if (code == absl::StatusCode::kOk) return false;  // the router holds the KvHandle
  return router_cancelled || code == absl::StatusCode::kCancelled ||
         code == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace tandem
