#include "kv_transfer/pull_watchdog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem {

PullWatchdog::PullWatchdog(std::string source_name, int64_t total_copies,
                           absl::Duration stall_timeout, absl::Duration close_timeout,
                           const CancellationToken* cancel, Clock clock)
    : source_name_(std::move(source_name)),
      total_copies_(total_copies),
      stall_timeout_(stall_timeout),
      close_timeout_(close_timeout),
      cancel_(cancel),
      clock_(std::move(clock)),
      last_completion_(clock_()) {}

bool PullWatchdog::PollCancel() {
  if (!cancelled_ && cancel_ != nullptr && cancel_->cancelled()) {
    cancelled_ = true;
  }
  return cancelled_;
}

void PullWatchdog::Blame(int32_t rank) {
  if (std::find(blamed_.begin(), blamed_.end(), rank) == blamed_.end()) blamed_.push_back(rank);
}

void PullWatchdog::Fail(absl::Status status) {
  if (failure_.ok()) failure_ = std::move(status);
}

void PullWatchdog::OnCopyFailed(int32_t rank, absl::Status status) {
  if (!cancelled_ && failure_.ok()) Blame(rank);
  Fail(std::move(status));
}

void PullWatchdog::OnPeerFailed(int32_t rank, absl::Status status) {
  Blame(rank);
  Fail(std::move(status));
}

void PullWatchdog::OnFailure(absl::Status status) { Fail(std::move(status)); }

PullWatchdog::Action PullWatchdog::Check(absl::FunctionRef<std::vector<int32_t>()> owing,
                                         int32_t gets, int32_t setups, int64_t completed) {
  const absl::Time now = clock_();
  if (!force_closed_) {
    const bool stalled = now - last_completion_ >= stall_timeout_;
    if (!stalled && !cancelled_) return Action::kWait;
    if (!cancelled_) {
      std::vector<int32_t> sorted = owing();
      std::sort(sorted.begin(), sorted.end());
      sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
      for (int32_t rank : sorted) Blame(rank);
      Fail(absl::DeadlineExceededError(
          absl::StrCat("KV transfer from ", source_name_, " stalled: no get completed for ",
                       absl::FormatDuration(stall_timeout_), "; ", gets, " gets",
                       setups > 0 ? absl::StrCat(" and ", setups, " connection set-up(s)") : "",
                       " outstanding to source rank(s) ", absl::StrJoin(sorted, ","), " after ",
                       completed, " of ", total_copies_, " copies")));
    }
    force_closed_ = true;
    abandon_at_ = now + close_timeout_;
    return Action::kForceClose;
  }
  return now >= abandon_at_ ? Action::kAbandon : Action::kWait;
}

absl::Duration PullWatchdog::WaitBudget(absl::Duration max_slice) const {
  const absl::Duration until_stall = stall_timeout_ - (clock_() - last_completion_);
  return std::clamp(until_stall, absl::ZeroDuration(), max_slice);
}

absl::Status PullWatchdog::Finish(int64_t completed,
                                  std::vector<int32_t>* failed_source_ranks) const {
  if (cancelled_) {
    return absl::CancelledError(absl::StrCat("KV transfer from ", source_name_, " cancelled after ",
                                             completed, " of ", total_copies_, " copies"));
  }
  if (failed_source_ranks != nullptr) {
    failed_source_ranks->insert(failed_source_ranks->end(), blamed_.begin(), blamed_.end());
  }
  return failure_;
}

}  // namespace tandem
