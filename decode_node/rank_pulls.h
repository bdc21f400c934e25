// RankPulls: a decode instance's KV pulls (docs/design.md#pulling-kv) on persistent workers — one
// SerialWorkers lane per rank, running that rank's KvPuller (thread-compatible: its calls stay on
// its lane, in order), plus one lane where OverlappedKvCheck checks KV digests while later
// ranges are still in flight. Replaces a thread started per rank per pull (per chunk when
// pipelined).
//
// Pull(source, plan, cancel): every rank's copies at once, each on its lane; the first failure
// cancels *cancel so the other ranks stop at once (the caller cancels it too: it is a child of the
// request's token, and the lease keeper's on_lost). Returns only when every rank's job
// has finished — nothing writes into the pools afterwards, and nothing of the call is referenced
// — and reports the cause, not the cancellations it triggered. A lane whose queue stays full for
// stall_timeout → RESOURCE_EXHAUSTED naming the rank. Failures the puller blames on source
// ranks carry them as a KvSourceFailure (common/kv_source_failure.h).
//
// Destruction runs the queued jobs (none: every Pull waits for its own) and joins the lanes.
// REQUIRES: the pullers and pools outlive this. Thread-safety: Pull is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cancellation.h"
#include "kv_transfer/copy_crcs.h"
#include "kv_transfer/kv_puller.h"
#include "kv_transfer/serial_workers.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

struct RankPullsOptions {
  int32_t max_in_flight = 1024;
  absl::Duration stall_timeout = absl::Seconds(10);
  int32_t queue_capacity = 256;  // pulls waiting per rank (concurrent requests)
};

class RankPulls {
 public:
  // pools[d]: rank d's local pool, where pullers[d] writes.
  RankPulls(std::vector<KvPuller*> pullers, std::vector<absl::Span<std::byte>> pools,
            RankPullsOptions options);
  RankPulls(const RankPulls&) = delete;
  RankPulls& operator=(const RankPulls&) = delete;

  // crcs, when given: one CopyCrcs per rank (OverlappedKvCheck::CrcRequests(plan)), passed to
  // that rank's puller as PullOptions::copy_crcs.
  [[nodiscard]] absl::Status Pull(const TransferMetadata& source, const TransferPlan& plan,
                                  CancellationToken* cancel, std::vector<CopyCrcs>* crcs = nullptr);

  // The lane for digest checks (OverlappedKvCheck), and its index.
  SerialWorkers* check_lanes() { return &check_lanes_; }
  static constexpr int32_t kCheckLane = 0;

 private:
  const std::vector<KvPuller*> pullers_;
  const std::vector<absl::Span<std::byte>> pools_;
  const RankPullsOptions options_;
  SerialWorkers lanes_;        // one per rank
  SerialWorkers check_lanes_;  // one
};

}  // namespace tandem
