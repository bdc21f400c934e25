// A Clock (router/clock.h) that passes time only when its owner waits on it or a test advances
// it: a driver's backoff, idle timeout or deadline takes no real time in a unit test. Starts at
// `start` (default: the Unix epoch + 1,000,000 s, far from any real deadline).
//
// Thread-safety: thread-safe.
#pragma once

#include "absl/synchronization/mutex.h"
#include "router/clock.h"

namespace tandem {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000)) : now_(start) {}

  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void SleepFor(absl::Duration duration) override { Advance(duration); }
  // Time passes at once; `wait` gets a deadline already past (it polls).
  void Wait(absl::Duration duration,
            absl::FunctionRef<void(absl::Time real_deadline)> wait) override {
    Advance(duration);
    wait(absl::InfinitePast());
  }
  void Advance(absl::Duration duration) {
    absl::MutexLock lock(&mu_);
    if (duration > absl::ZeroDuration()) now_ += duration;
  }
  void AdvanceTo(absl::Time time) {
    absl::MutexLock lock(&mu_);
    if (time > now_) now_ = time;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
