// One benchmark scenario of transfer_bench: a source peer process (this executable, re-run with
// --source_peer) holds a filled KV for `src`; this process plans the pull into `dst` and times,
// on the same UCX-allocated memory and transport:
//   planned  — UcxKvPuller::Execute of the plan (what Tandem does),
//   raw      — RawGetLoop over the same copy list (simplest ucp_get loop),
//   raw bulk — RawGetLoop over the gathered form of the copy list (gather_plan.h with the
//              puller's options): one get per segment into a scratch buffer plus the direct
//              copies — the same source bytes in the fewest gets, i.e. what the transport
//              itself achieves for them. Equal to raw when nothing is gathered.
//   memcpy   — MemcpyLoop over the same copy list between local buffers.
// After one untimed warm-up pass (which maps the source pools and is verified), each timed pass
// runs the three back to back; results are best-of and median-of, and the ratios are medians
// of the per-pass ratios (robust to load drifting on a shared machine).
// KV digests (docs/kv_transfer.md, Provable KV), digests on vs off in the same pass: after the
// planned pull, VerifyKvDigests of what it landed (the decode node's check) and
// ComputeKvDigests over local copies of the source pools holding the peer's exact content (the
// prefill node's cost), each timed and divided by that pass's pull; and digests on as the decode
// node runs them — the pull in block ranges with each landed range checked while the next is
// pulled (OverlappedKvCheck) — timed end to end right after the planned pull (digests off); and
// digests on vs off as the node now runs them: the same ranges pulled with and without the CRC
// fused into the copy (copy_crcs.h) and the check from those CRCs, taking turns going first.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/testing/source_peer.h"
#include "kv_transfer/ucx/testing/transports.h"

namespace tandem::bench {

struct Scenario {
  std::string name;
  KvLayout src;
  KvLayout dst;  // REQUIRES: dst.world() == 1 (one decode rank is timed)
  int64_t tokens = 0;
};

struct ScenarioOptions {
  std::string self_executable;
  testing::Transport transport = testing::Transport::kSharedMemory;
  int32_t reps = 7;  // >= 1
  int32_t max_in_flight = 1024;
  bool verify = true;         // check every byte of the first planned pull
  UcxKvPullerOptions puller;  // its `ucx` is set from `transport`
  bool raw_per_copy = true;   // false: skip the raw loop over the copy list (raw times are 0)
  // Range size of the overlapped check (DecodeNodeOptions::pull_chunk_bytes' default).
  int64_t check_range_bytes = int64_t{16} << 20;
};

struct Timing {
  absl::Duration best = absl::InfiniteDuration();
  absl::Duration median = absl::InfiniteDuration();
};

struct ScenarioResult {
  int64_t bytes = 0;   // bytes one destination rank pulls
  int64_t copies = 0;  // planned copies of that rank
  int32_t source_ranks = 0;
  int64_t segments = 0;       // segment gets of the gathered form (0: nothing gathered)
  int64_t segment_bytes = 0;  // bytes they read
  Timing planned;
  Timing raw;
  Timing raw_bulk;
  Timing memcpy;
  std::vector<absl::Duration> planned_passes, raw_passes, raw_bulk_passes, memcpy_passes;
  double planned_vs_raw = 0;         // median over passes of raw time / planned time
  double planned_vs_raw_bulk = 0;    // median over passes of raw bulk time / planned time
  double planned_vs_memcpy = 0;      // median over passes of memcpy time / planned time
  absl::Duration planned_post_best;  // time inside the posting loop, best planned rep
  absl::Duration first_pull;         // warm-up pull: connection setup and pool mapping included
  absl::Duration gather_plan_time;   // PlanGather over the copy list (part of every planned pull)
  double source_cpu_ms = 0;          // source peer CPU (all threads) during the planned reps
  // KV digests: decode-side check and prefill-side computation, and their medians of per-pass
  // ratios to the planned pull of the same pass.
  Timing digest_check;
  Timing digest_compute;
  double digest_check_vs_pull = 0;
  double digest_compute_vs_pull = 0;
  // Digests on, overlapped: pull + check end to end, and the median over passes of
  // (that time / the pass's planned pull) - 1 — the visible cost of the check.
  Timing pull_checked;
  double digest_overlapped_overhead = 0;
  // The same with each range checked inline on the pulling thread as it lands (no lane).
  double digest_inline_overhead = 0;
  // Digests on vs off as the decode node pulls, side by side in each pass: the same block
  // ranges, on = CRCs computed in the copy and each range checked from them as it lands.
  // digest_cost_over_transfer = median over passes of (on ÷ off) − 1 (issue 28's goal: ≤ 0.03).
  Timing pull_digests_on;
  Timing pull_digests_off;
  double digest_cost_over_transfer = 0;
  int64_t fused_check_bytes = 0;        // bytes the check took from the copy's CRCs (last on pass)
  absl::Duration fused_check_time;      // the check's own time in the last on pass
  absl::Duration fused_request_time;    // building the CRC requests, last on pass
  int64_t check_ranges = 0;             // ranges the pull went in
  int32_t check_ranges_overlapped = 0;  // of them, checked on the lane during the pull
};

// A block table as a block manager hands it out after some churn: a fixed permutation of
// [0, n), so consecutive virtual blocks rarely sit in consecutive physical blocks.
[[nodiscard]] std::vector<int32_t> ScatteredBlocks(int64_t n, uint64_t seed);

// The source peer's config for `scenario` under `engine_id`: its layout, tokens and a scattered
// block table (seed 1).
[[nodiscard]] testing::SourcePeerConfig SourceConfigFor(const Scenario& scenario,
                                                        std::string engine_id);

// The decode side's scattered block table for `scenario` (seed 2).
[[nodiscard]] std::vector<int32_t> DestinationBlocksFor(const Scenario& scenario);

// The best and the median of `samples` (REQUIRES: not empty).
[[nodiscard]] Timing Summarise(std::vector<absl::Duration> samples);

[[nodiscard]] absl::StatusOr<ScenarioResult> RunScenario(const Scenario& scenario,
                                                         const ScenarioOptions& options);

}  // namespace tandem::bench
