#include "serving/drain_gate.h"

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
