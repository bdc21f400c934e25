// Clocks for the attention benchmark. Wall time is the real measure; the calling thread's CPU
// time is a fallback for busy shared machines, where other processes steal whole time slices:
// with --threads=1 it still counts every cycle the measured code ran or stalled on memory, but
// not the time it spent descheduled.
#pragma once

#include <time.h>

#include <chrono>

namespace tandem::bench {

enum class BenchClock { kWall, kThreadCpu };

inline double ClockSeconds(BenchClock clock) {
  if (clock == BenchClock::kThreadCpu) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tandem::bench
