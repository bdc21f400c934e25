#include "router/call_canceller.h"

namespace tandem {

// Cancel runs under mu_ so that it cannot race with the Registration's destructor (after which
// the call may be destroyed). It does not call back into this class: the call's completion is
// delivered to the call's own reader.
void CallCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (active_ != nullptr) active_->Cancel();
}

bool CallCanceller::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

CallCanceller::Registration::Registration(CallCanceller* owner, Cancellable* call) : owner_(owner) {
  absl::MutexLock lock(&owner_->mu_);
  owner_->active_ = call;
  if (owner_->cancelled_) call->Cancel();
}

CallCanceller::Registration::~Registration() {
  absl::MutexLock lock(&owner_->mu_);
  owner_->active_ = nullptr;
}

}  // namespace tandem
