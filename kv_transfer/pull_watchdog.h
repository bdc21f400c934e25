// PullWatchdog: the stall / cancel / blame policy of one KvPuller::Execute
// (kv_transfer/kv_puller.h, docs/design.md#pulling-kv), shared by every puller (UcxKvPuller,
// FakeKvPuller) so they cannot drift. Pure: std + abseil; time comes from an injected clock, so
// every decision is unit-tested without a transport (tests/kv_transfer/pull_watchdog_test.cc).
//
// The puller reports events; the watchdog decides:
//   * PollCancel(): latches the caller's cancellation token (common/cancellation.h). Once
//   cancelled, nothing is blamed and
//     Finish returns CANCELLED ("KV transfer from <source> cancelled after k of n copies").
//   * OnCompletion(): a copy (or a connection set-up) finished — the stall clock restarts.
//   * OnCopyFailed(rank, status): a get failed. The first failure is the result; the rank is
//     blamed unless the pull was already failing or cancelled (a get our own force-close
//     cancelled lands here too, and is nobody's fault).
//   * OnPeerFailed(rank, status): the transport says the peer itself failed (endpoint error,
//     connect failure): the rank is always blamed, the first failure is the result.
//   * OnFailure(status): a failure nobody is blamed for (a short completion).
//   * Check(owing, gets, setups, completed): with work outstanding, what to do now —
//       kWait        keep waiting (at most WaitBudget());
//       kForceClose  stalled (no completion for stall_timeout: the `owing` ranks are blamed and
//                    the result is DEADLINE_EXCEEDED naming them) or cancelled: close the owing
//                    ranks' connections now; returned once per pull;
//       kAbandon     close_timeout after the force-close something is still outstanding: hand
//                    it back to the transport and return rather than hang.
//   * Finish(completed, failed_source_ranks): appends the blamed ranks (each once, in blame
//     order) unless cancelled, and returns the pull's status.
// Thread-safety: thread-compatible (one pull's thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cancellation.h"

namespace tandem {

class PullWatchdog {
 public:
  using Clock = std::function<absl::Time()>;
  enum class Action { kWait, kForceClose, kAbandon };

  // source_name: "engine 'p0' epoch 3", as errors name the source. total_copies: the pull's n.
  // cancel: the caller's token (may be null). REQUIRES: stall_timeout > 0.
  PullWatchdog(std::string source_name, int64_t total_copies, absl::Duration stall_timeout,
               absl::Duration close_timeout, const CancellationToken* cancel,
               Clock clock = &absl::Now);

  bool PollCancel();
  void OnCompletion() { last_completion_ = clock_(); }
  void OnCopyFailed(int32_t rank, absl::Status status);
  void OnPeerFailed(int32_t rank, absl::Status status);
  void OnFailure(absl::Status status);

  // REQUIRES: something is outstanding (gets + setups > 0). `owing` lists the source ranks with
  // operations outstanding (called only when a stall is declared, so a puller scans its
  // window once, not every turn); `completed`: copies done so far (for the stall message).
  Action Check(absl::FunctionRef<std::vector<int32_t>()> owing, int32_t gets, int32_t setups,
               int64_t completed);
  // How long the puller may block waiting for an event now: the time left until a stall, in
  // [0, max_slice].
  absl::Duration WaitBudget(absl::Duration max_slice) const;
  // When the stall clock runs out if nothing completes before.
  absl::Time stall_deadline() const { return last_completion_ + stall_timeout_; }

  [[nodiscard]] absl::Status Finish(int64_t completed,
                                    std::vector<int32_t>* failed_source_ranks) const;

  bool cancelled() const { return cancelled_; }
  bool failed() const { return !failure_.ok(); }
  // Posting more work is pointless: the pull failed or was cancelled.
  bool stopping() const { return cancelled_ || !failure_.ok(); }
  bool force_closed() const { return force_closed_; }
  const absl::Status& failure() const { return failure_; }
  const std::vector<int32_t>& blamed() const { return blamed_; }

 private:
  void Blame(int32_t rank);
  void Fail(absl::Status status);

  const std::string source_name_;
  const int64_t total_copies_;
  const absl::Duration stall_timeout_;
  const absl::Duration close_timeout_;
  const CancellationToken* const cancel_;
  const Clock clock_;

  absl::Time last_completion_;
  absl::Time abandon_at_ = absl::InfiniteFuture();
  bool cancelled_ = false;
  bool force_closed_ = false;
  absl::Status failure_;
  std::vector<int32_t> blamed_;
};

}  // namespace tandem
