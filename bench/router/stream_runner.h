// How the bench's callback clients (capacity_clients.h) run a step: RunCallbackStreams starts
// spec.streams streams evenly over spec.spread, each by a caller's function that hands the stream
// its result and a Countdown to tick when it ends (on gRPC's thread), then waits for all of them.
//
// Thread-safety: Countdown's methods are thread-safe.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/router/capacity_clients.h"

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

// `start(i, result, done, deadline)` starts stream i (result->client_id already set), which must
// call done->Done() once as it ends, by `deadline`. `what` names the streams in the abort message.
inline std::vector<StreamResult> RunCallbackStreams(
    const LoadSpec& spec, const char* what,
    absl::FunctionRef<void(int, StreamResult*, Countdown*, absl::Time)> start) {
  std::vector<StreamResult> results(spec.streams);
  Countdown done(spec.streams);
  const absl::Time began = absl::Now();
  const absl::Time deadline = began + spec.timeout;
  for (int i = 0; i < spec.streams; ++i) {
    // Spread the starts; the wait is the load's schedule, not synchronisation.
    const absl::Time at = began + spec.spread * i / spec.streams;
    if (absl::Now() < at) absl::SleepFor(at - absl::Now());
    results[i].client_id = absl::StrCat(spec.id_prefix, i);
    start(i, &results[i], &done, deadline);
  }
  // Each stream's own deadline ends it; this bound only adds a margin for the last end. A stream
  // still running past it would outlive `results`: stop loudly instead.
  if (!done.Wait(deadline + absl::Seconds(30))) {
    std::fprintf(stderr, "router_capacity_bench: %s streams outlived their deadline\n", what);
    std::abort();
  }
  return results;
}

}  // namespace tandem::bench
