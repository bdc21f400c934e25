// When each request of an open-loop (Poisson) load is sent: arrival offsets from the start of the
// run, for a sequence of rate stages (a ramp). Within a stage the gaps are exponential with the
// stage's rate; at a stage boundary the draw restarts at the boundary with the next rate (valid
// because the exponential is memoryless). Pure and deterministic for a seed.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::bench {

struct RateStage {
  double rate_rps = 1;                                 // > 0, requests per second
  absl::Duration duration = absl::InfiniteDuration();  // the last stage may be infinite
};

// Arrival offsets (non-decreasing) of at most `max_requests` requests over `stages`; the
// schedule ends when the stages end or `max_requests` is reached. kInvalidArgument on no stages,
// a rate <= 0, a duration <= 0, an infinite stage that is not the last, or an infinite last stage
// with `max_requests` <= 0 (the schedule would never end).
absl::StatusOr<std::vector<absl::Duration>> PoissonArrivals(const std::vector<RateStage>& stages,
                                                            int64_t max_requests, uint64_t seed);

}  // namespace tandem::bench
