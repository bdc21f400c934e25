#include "router/clock.h"

#include "absl/time/clock.h"

namespace tandem {
namespace {

class AbslClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration duration) override { absl::SleepFor(duration); }
  void Wait(absl::Duration duration,
            absl::FunctionRef<void(absl::Time real_deadline)> wait) override {
    wait(absl::Now() + duration);
  }
};

}  // namespace

Clock* RealClock() {
  static AbslClock* const clock = new AbslClock();
  return clock;
}

}  // namespace tandem
