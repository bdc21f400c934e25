// The router driver's clock: what time it is and how a wait passes. RealClock() is absl's; a
// test's FakeClock (router/fake/fake_clock.h) passes time only when the driver waits, so retry
// backoffs, idle timeouts and deadlines are tested without sleeping.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace tandem {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  virtual void SleepFor(absl::Duration duration) = 0;
  // Lets `duration` pass while `wait(real_deadline)` blocks on something outside the clock (a
  // condition another thread signals) until at most `real_deadline` (absl time). The real clock
  // passes now + duration; a fake clock advances itself and passes the real now (a poll).
  virtual void Wait(absl::Duration duration,
                    absl::FunctionRef<void(absl::Time real_deadline)> wait) = 0;
};

// absl::Now / absl::SleepFor. Never null.
Clock* RealClock();

}  // namespace tandem
