// Drives a Backend with a load and collects one RequestRecord per request sent.
//
// Closed loop (`concurrency` > 0): that many workers each send their next request as soon as
// the previous one ends. Open loop (`arrivals` non-empty, from PoissonArrivals): request i is
// sent at arrivals[i] from the start, each on its own thread, at most `max_concurrency` in
// flight (0 = no cap; a request over the cap waits and its latency counts from when it is sent).
// Both stop starting requests after `max_requests` (<= 0: no bound) or once `max_duration` has
// passed; requests in flight then finish (each bounded by `request_timeout`). The run's
// duration, the divisor of every rate, is start of the run → last completion.
//
// Progress: when `progress` is set, a line is rewritten on it every `progress_interval`
// (requests sent/done/failed, the last interval's req/s and output tok/s).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/serve/backend.h"
#include "bench/serve/request_source.h"

namespace tandem::bench {

struct LoadOptions {
  int concurrency = 0;
  std::vector<absl::Duration> arrivals;
  int max_concurrency = 0;
  int64_t max_requests = 0;
  absl::Duration max_duration = absl::InfiniteDuration();
  absl::Duration request_timeout = absl::Minutes(10);
  std::ostream* progress = nullptr;
  absl::Duration progress_interval = absl::Seconds(1);
};

struct LoadResult {
  std::vector<RequestRecord> records;  // in completion order
  absl::Duration duration;
};

// kInvalidArgument when neither or both of concurrency and arrivals are given, or when nothing
// bounds a closed-loop run (no max_requests and no max_duration).
absl::StatusOr<LoadResult> RunLoad(Backend& backend, const RequestSource& source,
                                   const LoadOptions& options);

}  // namespace tandem::bench
