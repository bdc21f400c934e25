#include "serving/drain_gate.h"

#include "absl/strings/str_cat.h"

namespace tandem {

DrainGate::Pass::~Pass() {
  if (gate_ != nullptr) gate_->Leave();
}

std::optional<DrainGate::Pass> DrainGate::Enter() {
  absl::MutexLock lock(&mu_);
  if (draining_) return std::nullopt;
  ++in_flight_;
  return Pass(this);
}

absl::StatusOr<DrainGate::Pass> DrainGate::Admit(int64_t running) {
  absl::MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("instance is draining (shutting down)");
  const int64_t queued = in_flight_ - running;
  if (max_queued_ > 0 && queued >= max_queued_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("instance queue is full: ", queued, " requests waiting, limit ", max_queued_,
                     " (--max_queued_requests); retry later or on another instance"));
  }
  ++in_flight_;
  return Pass(this);
}

void DrainGate::SetQueueLimit(int64_t max_queued) {
  absl::MutexLock lock(&mu_);
  max_queued_ = max_queued;
}

void DrainGate::StartDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool DrainGate::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

int64_t DrainGate::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

bool DrainGate::WaitIdle(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

void DrainGate::Leave() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

}  // namespace tandem
