#include "bench/serve/arrival_schedule.h"

#include "absl/strings/str_cat.h"
#include "bench/serve/length_distribution.h"

namespace tandem::bench {

absl::StatusOr<std::vector<absl::Duration>> PoissonArrivals(const std::vector<RateStage>& stages,
                                                            int64_t max_requests, uint64_t seed) {
  if (stages.empty()) return absl::InvalidArgumentError("arrival schedule: no rate stages");
  for (size_t i = 0; i < stages.size(); ++i) {
    if (!(stages[i].rate_rps > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("arrival schedule: stage ", i, " has rate ",
                                                     stages[i].rate_rps,
                                                     " req/s; rates must be > 0"));
    }
    if (stages[i].duration <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("arrival schedule: stage ", i, " has a duration <= 0"));
    }
    if (stages[i].duration == absl::InfiniteDuration() && i + 1 != stages.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("arrival schedule: stage ", i, " is unbounded but is not the last"));
    }
  }
  if (stages.back().duration == absl::InfiniteDuration() && max_requests <= 0) {
    return absl::InvalidArgumentError(
        "arrival schedule: the last stage is unbounded and there is no request bound");
  }
  Rng rng(seed);
  std::vector<absl::Duration> arrivals;
  absl::Duration stage_start = absl::ZeroDuration();
  for (const RateStage& stage : stages) {
    const absl::Duration stage_end = stage_start + stage.duration;
    absl::Duration t = stage_start;
    while (max_requests <= 0 || static_cast<int64_t>(arrivals.size()) < max_requests) {
      t += absl::Seconds(Exponential(rng, stage.rate_rps));
      if (t >= stage_end) break;
      arrivals.push_back(t);
    }
    stage_start = stage_end;
    if (max_requests > 0 && static_cast<int64_t>(arrivals.size()) >= max_requests) break;
  }
  return arrivals;
}

}  // namespace tandem::bench
