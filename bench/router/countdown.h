// A count of streams still running that the bench's clients wait on (capacity_clients.h): each
// stream's end calls Done(); Wait() returns when all ended or at the deadline.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem::bench {

class Countdown {
 public:
  explicit Countdown(int n) : left_(n) {}
  void Done() {
    absl::MutexLock lock(&mu_);
    --left_;
  }
  // True when every stream ended before `deadline`.
  bool Wait(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    const auto zero = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return left_ == 0; };
    return mu_.AwaitWithDeadline(absl::Condition(&zero), deadline);
  }

 private:
  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::bench
