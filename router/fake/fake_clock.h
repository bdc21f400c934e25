// A Clock (router/clock.h) that passes time only when its owner waits on it or a test advances
// it: a driver's backoff, idle timeout or deadline takes no real time in a unit test. A Wait
// stops at the next alarm (AddAlarm: when a fake stream has something for a waiter). Starts at
// `start` (default: the Unix epoch + 1,000,000 s, far from any real deadline).
//
// Thread-safety: thread-safe.
#pragma once

#include <algorithm>
#include <vector>

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
  // Time passes at once, up to the first alarm that comes sooner; `wait` gets a deadline
  // already past (it polls).
  void Wait(absl::Duration duration,
            absl::FunctionRef<void(absl::Time real_deadline)> wait) override {
    {
      absl::MutexLock lock(&mu_);
      absl::Time until = duration > absl::ZeroDuration() ? now_ + duration : now_;
      for (const absl::Time alarm : alarms_) {
        if (alarm > now_) until = std::min(until, alarm);
      }
      now_ = until;
      alarms_.erase(std::remove_if(alarms_.begin(), alarms_.end(),
                                   [this](absl::Time alarm) { return alarm <= now_; }),
                    alarms_.end());
    }
    wait(absl::InfinitePast());
  }
  // A time at which a Wait stops early: a fake stream's arrival, which would wake a real wait
  // on its Arrivals (router/arrivals.h).
  void AddAlarm(absl::Time at) {
    absl::MutexLock lock(&mu_);
    if (at > now_) alarms_.push_back(at);
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
  std::vector<absl::Time> alarms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
