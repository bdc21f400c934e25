#include "bench/transfer/transfer_scenario.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "attention/dcp_layout.h"
#include "bench/transfer/raw_get_loop.h"
#include "common/status_macros.h"
#include "kv_transfer/copy_crcs.h"
#include "kv_transfer/gather_plan.h"
#include "kv_transfer/kv_digest.h"
#include "kv_transfer/overlapped_kv_check.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/serial_workers.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/testing/kv_pattern.h"
#include "kv_transfer/ucx/testing/source_peer.h"
#include "kv_transfer/ucx/transfer_checks.h"

namespace tandem::bench {
namespace {

// utime + stime of a process, all threads, in milliseconds.
double ProcessCpuMs(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

std::vector<int32_t> ScatteredBlocks(int64_t n, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  uint64_t s = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(ids[i], ids[(s >> 33) % static_cast<uint64_t>(i + 1)]);
  }
  return ids;
}

Timing Summarise(std::vector<absl::Duration> samples) {
  std::sort(samples.begin(), samples.end());
  return Timing{samples.front(), samples[samples.size() / 2]};
}

testing::SourcePeerConfig SourceConfigFor(const Scenario& sc, std::string engine_id) {
  testing::SourcePeerConfig config;
  config.engine_id = std::move(engine_id);
  config.compat_hash = CompatibilityHash("bench-model", sc.src);
  config.layout = sc.src;
  config.blocks = ScatteredBlocks(VirtualBlocksFor(sc.src.parallel.dcp_geometry(), sc.tokens), 1);
  config.num_tokens = sc.tokens;
  return config;
}

std::vector<int32_t> DestinationBlocksFor(const Scenario& sc) {
  return ScatteredBlocks(VirtualBlocksFor(sc.dst.parallel.dcp_geometry(), sc.tokens), 2);
}

absl::StatusOr<ScenarioResult> RunScenario(const Scenario& sc, const ScenarioOptions& options) {
  if (sc.dst.world() != 1) return absl::InvalidArgumentError("benchmark times one decode rank");
  const testing::SourcePeerConfig config = SourceConfigFor(sc, "bench-" + sc.name);
  const std::vector<int32_t> dst_blocks = DestinationBlocksFor(sc);

  testing::SourcePeerProcess::Options peer_options;
  peer_options.executable = options.self_executable;
  peer_options.args = {"--source_peer"};
  peer_options.env = testing::UcxEnvironment(options.transport);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<testing::SourcePeerProcess> peer,
                          testing::SourcePeerProcess::Spawn(peer_options, config));
  const TransferMetadata& metadata = peer->metadata();
  TANDEM_RETURN_IF_ERROR(CheckHandshake(CompatibilityHash("bench-model", sc.dst), metadata));
  TANDEM_ASSIGN_OR_RETURN(TransferPlan plan, PlanKvTransfer(metadata.layout, config.blocks, sc.dst,
                                                            dst_blocks, sc.tokens));
  const std::vector<TransferCopy>& copies = plan.copies[0];

  const UcxOptions ucx{testing::UcxSettings(options.transport)};
  UcxKvPullerOptions puller_options = options.puller;
  puller_options.ucx = ucx;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxKvPuller> puller, UcxKvPuller::Create(puller_options));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvPoolMemory> pool,
                          puller->AllocatePool(testing::PoolBytesForBlocks(sc.dst, dst_blocks)));
  auto* local = static_cast<std::byte*>(pool->base());
  const absl::Span<std::byte> local_span(local, static_cast<size_t>(pool->bytes()));
  testing::PoisonPool(local_span);  // also faults every page in before timing

  // The raw loop gets its own worker and endpoints: nothing of UcxKvPuller on its path.
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxContext> raw_context, UcxContext::Create(ucx));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxWorker> raw_worker,
                          UcxWorker::Create(std::shared_ptr<UcxContext>(std::move(raw_context))));
  std::vector<std::unique_ptr<RemoteRank>> raw_remotes;
  std::vector<RemoteRank*> raw_by_rank(metadata.ranks.size(), nullptr);
  for (size_t r = 0; r < metadata.ranks.size(); ++r) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<RemoteRank> remote,
                            RemoteRank::Connect(raw_worker.get(), metadata.ranks[r],
                                                absl::StrCat("raw source rank ", r)));
    raw_by_rank[r] = remote.get();
    raw_remotes.push_back(std::move(remote));
  }

  // The gathered form of the copy list, for the raw bulk baseline: the direct copies as they are,
  // each segment read into a scratch ring of staging-slot size (its bytes are not used).
  const absl::Time gather_start = absl::Now();
  const GatherPlan gather = PlanGather(copies, puller_options.gather, [](int32_t) { return true; });
  const absl::Duration gather_time = absl::Now() - gather_start;
  std::vector<TransferCopy> bulk;
  for (int64_t i : gather.direct) bulk.push_back(copies[i]);
  const int64_t ring_slots = 16;
  std::vector<std::byte> scratch(
      gather.segments.empty()
          ? 0
          : static_cast<size_t>(ring_slots * puller_options.gather.max_segment_bytes));
  for (size_t i = 0; i < gather.segments.size(); ++i) {
    const GatherSegment& seg = gather.segments[i];
    bulk.push_back(
        TransferCopy{seg.src_rank, seg.src_offset,
                     static_cast<int64_t>(i % ring_slots) * puller_options.gather.max_segment_bytes,
                     seg.length});
  }
  // RawGetLoop writes at local + dst_offset: direct copies into the pool, segments into scratch.
  auto raw_bulk_loop = [&]() -> absl::StatusOr<absl::Duration> {
    const size_t direct = gather.direct.size();
    TANDEM_ASSIGN_OR_RETURN(
        absl::Duration a,
        RawGetLoop(*raw_worker, raw_by_rank, absl::MakeConstSpan(bulk).first(direct), local));
    if (gather.segments.empty()) return a;
    TANDEM_ASSIGN_OR_RETURN(absl::Duration b,
                            RawGetLoop(*raw_worker, raw_by_rank,
                                       absl::MakeConstSpan(bulk).subspan(direct), scratch.data()));
    return a + b;
  };

  // Local stand-ins for the source pools, for the memcpy baseline and the digests: the peer's
  // exact content (FillSourcePool, as the peer fills its pools), so the check passes.
  std::vector<std::vector<std::byte>> local_sources;
  std::vector<std::byte*> source_ptrs;
  std::vector<absl::Span<const std::byte>> source_views;
  for (size_t r = 0; r < metadata.ranks.size(); ++r) {
    local_sources.emplace_back(static_cast<size_t>(metadata.ranks[r].pool_bytes));
    testing::FillSourcePool(sc.src, static_cast<int32_t>(r), config.blocks, sc.tokens,
                            absl::MakeSpan(local_sources.back()));
    source_ptrs.push_back(local_sources.back().data());
    source_views.emplace_back(local_sources.back().data(), local_sources.back().size());
  }
  const std::vector<uint32_t> generations(config.blocks.size(), 0);
  const KvDigestBinding binding{"bench-request", 1, config.blocks, generations};
  std::vector<uint32_t> digests;
  auto compute_digests = [&]() -> absl::StatusOr<absl::Duration> {
    const absl::Time start = absl::Now();
    TANDEM_ASSIGN_OR_RETURN(digests, ComputeKvDigests(sc.src, source_views, sc.tokens, binding,
                                                      DefaultKvDigestThreads()));
    return absl::Now() - start;
  };
  const std::vector<absl::Span<const std::byte>> dst_views = {
      absl::Span<const std::byte>(local, static_cast<size_t>(pool->bytes()))};
  auto check_digests = [&]() -> absl::StatusOr<absl::Duration> {
    const absl::Time start = absl::Now();
    TANDEM_RETURN_IF_ERROR(VerifyKvDigests(sc.src, sc.dst, plan, sc.tokens, binding, digests,
                                           dst_views, nullptr, DefaultKvDigestThreads()));
    return absl::Now() - start;
  };

  // Digests on, as a decode node runs them (DecodeNode::PullAll, OverlappedKvCheck): the pull in
  // block ranges of about options.check_range_bytes, each landed range checked on a lane while
  // the next is pulled, the last checked after the pull. Timed end to end, planning included.
  SerialWorkers check_lane("bench check lane", 1, 256);
  const int64_t num_blocks = static_cast<int64_t>(config.blocks.size());
  const int64_t per_range =
      BlocksPerPullRange(plan.total_bytes(), num_blocks, options.check_range_bytes);
  const int64_t block_tokens = VirtualBlockTokens(sc.src.parallel.dcp_geometry());
  int32_t ranges_overlapped = 0;
  auto pull_checked = [&](const PullOptions& po,
                          bool inline_check) -> absl::StatusOr<absl::Duration> {
    const absl::Time start = absl::Now();
    OverlappedKvCheck check(
        OverlappedKvCheckInput{sc.src, sc.dst, sc.tokens, "bench-request", 1, config.blocks,
                               generations, dst_blocks, dst_views},
        inline_check ? nullptr : &check_lane, 0);
    TANDEM_RETURN_IF_ERROR(check.SetDigests(digests));
    for (int64_t b = 0; b < num_blocks; b += per_range) {
      const int64_t begin = b * block_tokens;
      const int64_t end = std::min(sc.tokens, (b + per_range) * block_tokens);
      TANDEM_ASSIGN_OR_RETURN(
          TransferPlan part, PlanKvTransferRange(metadata.layout, config.blocks, sc.dst, dst_blocks,
                                                 sc.tokens, begin, end));
      TANDEM_RETURN_IF_ERROR(puller->Execute(metadata, part.copies[0], local_span, po));
      check.Landed(end);
    }
    TANDEM_RETURN_IF_ERROR(check.Finish(nullptr, DefaultKvDigestThreads()));
    if (!inline_check) ranges_overlapped = check.early_checks();
    return absl::Now() - start;
  };

  // Digests on vs off as the decode node pulls (DecodeNode::PullAll). Off: the whole prompt in one
  // planned pull. On: block ranges, the puller also CRCing what it copies (PullOptions::copy_crcs,
  // the check's requests) and each range checked from those CRCs as it lands (nothing read back
  // where the bytes went through this process: a mapped shared-memory pool); once a range came
  // back wholly CRCed the rest is one pull. Both timed end to end, planning included: the
  // difference is the whole cost of digests on the decode side.
  int64_t fused_bytes = 0;
  absl::Duration fused_check_time, fused_request_time;
  auto pull_ranges = [&](const PullOptions& base,
                         bool digests_on) -> absl::StatusOr<absl::Duration> {
    const absl::Time start = absl::Now();
    absl::Duration request_time;
    OverlappedKvCheck check(
        OverlappedKvCheckInput{sc.src, sc.dst, sc.tokens, "bench-request", 1, config.blocks,
                               generations, dst_blocks, dst_views},
        &check_lane, 0);
    if (digests_on) TANDEM_RETURN_IF_ERROR(check.SetDigests(digests));
    // Off: one pull of the whole prompt, as the node does without digests. On: ranges, the rest
    // in one pull once a range came back wholly CRCed (DecodeNode::PullAll).
    for (int64_t b = 0, step = digests_on ? per_range : num_blocks; b < num_blocks; b += step) {
      if (b > 0 && check.last_pull_fused()) step = num_blocks - b;
      const int64_t begin = b * block_tokens;
      const int64_t end = std::min(sc.tokens, (b + step) * block_tokens);
      TANDEM_ASSIGN_OR_RETURN(
          TransferPlan part, PlanKvTransferRange(metadata.layout, config.blocks, sc.dst, dst_blocks,
                                                 sc.tokens, begin, end));
      PullOptions po = base;
      std::vector<CopyCrcs> crcs;
      if (digests_on) {
        const absl::Time req_start = absl::Now();
        TANDEM_ASSIGN_OR_RETURN(crcs, check.CrcRequests(part));
        request_time += absl::Now() - req_start;
        po.copy_crcs = &crcs[0];
      }
      TANDEM_RETURN_IF_ERROR(puller->Execute(metadata, part.copies[0], local_span, po));
      if (digests_on) check.Landed(end, &part, &crcs);
    }
    if (digests_on) {
      TANDEM_RETURN_IF_ERROR(check.Finish(nullptr, DefaultKvDigestThreads()));
      fused_bytes = check.fused_bytes();
      fused_check_time = check.check_time();
      fused_request_time = request_time;
    }
    return absl::Now() - start;
  };
  ScenarioResult result;
  result.copies = static_cast<int64_t>(copies.size());
  result.segments = static_cast<int64_t>(gather.segments.size());
  result.gather_plan_time = gather_time;
  result.segment_bytes = gather.segment_bytes();
  result.bytes = plan.total_bytes();
  result.source_ranks = static_cast<int32_t>(metadata.ranks.size());
  PullOptions pull;
  pull.max_in_flight = options.max_in_flight;
  pull.stall_timeout = absl::Seconds(30);

  // Warm-up pass, untimed in the statistics: the first pull maps the source pools into this
  // process (page-table population dominates it) and is verified byte for byte.
  {
    const absl::Time start = absl::Now();
    TANDEM_RETURN_IF_ERROR(puller->Execute(metadata, copies, local_span, pull));
    result.first_pull = absl::Now() - start;
    if (options.verify) {
      TANDEM_RETURN_IF_ERROR(
          testing::VerifyDestinationPool(sc.dst, 0, dst_blocks, sc.tokens, local_span));
    }
    TANDEM_RETURN_IF_ERROR(compute_digests().status());
    TANDEM_RETURN_IF_ERROR(check_digests().status());  // what a real UCX pull landed passes
    TANDEM_RETURN_IF_ERROR(pull_checked(pull, false).status());
    TANDEM_RETURN_IF_ERROR(pull_checked(pull, true).status());
    TANDEM_RETURN_IF_ERROR(pull_ranges(pull, true).status());
    TANDEM_RETURN_IF_ERROR(pull_ranges(pull, false).status());
    if (options.raw_per_copy) {
      TANDEM_RETURN_IF_ERROR(RawGetLoop(*raw_worker, raw_by_rank, copies, local).status());
    }
    TANDEM_RETURN_IF_ERROR(raw_bulk_loop().status());
    MemcpyLoop(source_ptrs, copies, local);
  }

  // Timed passes: planned, raw and memcpy back to back, so the ratios of one pass see the same
  // machine load (this machine is shared and has 2 cores).
  std::vector<absl::Duration> planned, raw, raw_bulk, copy, checks, computes, checked_pulls;
  std::vector<double> vs_raw, vs_raw_bulk, vs_memcpy, check_vs, compute_vs, overlapped_vs,
      inline_vs, fused_vs;
  std::vector<absl::Duration> fused_on, fused_off;
  result.planned_post_best = absl::InfiniteDuration();
  double cpu_ms = 0;
  for (int32_t rep = 0; rep < options.reps; ++rep) {
    // Whichever reads the source second may find it in cache (it matters for short prompts),
    // so planned and raw take turns going first.
    absl::Duration raw_time;
    if (rep % 2 == 1 && options.raw_per_copy) {
      TANDEM_ASSIGN_OR_RETURN(raw_time, RawGetLoop(*raw_worker, raw_by_rank, copies, local));
    }
    PullProgress progress;
    pull.progress = &progress;
    const double cpu_before = ProcessCpuMs(peer->pid());
    const absl::Time start = absl::Now();
    TANDEM_RETURN_IF_ERROR(puller->Execute(metadata, copies, local_span, pull));
    const absl::Duration elapsed = absl::Now() - start;
    cpu_ms += ProcessCpuMs(peer->pid()) - cpu_before;
    planned.push_back(elapsed);
    TANDEM_ASSIGN_OR_RETURN(const absl::Duration check_time, check_digests());
    TANDEM_ASSIGN_OR_RETURN(const absl::Duration compute_time, compute_digests());
    checks.push_back(check_time);
    computes.push_back(compute_time);
    // Digests on (the overlapped check) right after digests off (the planned pull above).
    pull.progress = nullptr;
    TANDEM_ASSIGN_OR_RETURN(const absl::Duration checked_time, pull_checked(pull, false));
    checked_pulls.push_back(checked_time);
    overlapped_vs.push_back(absl::FDivDuration(checked_time, elapsed) - 1.0);
    TANDEM_ASSIGN_OR_RETURN(const absl::Duration inline_time, pull_checked(pull, true));
    inline_vs.push_back(absl::FDivDuration(inline_time, elapsed) - 1.0);
    // Digests on and off side by side, taking turns going first (a pass's second pull may find
    // the source warmer).
    absl::Duration on_time, off_time;
    if (rep % 2 == 0) {
      TANDEM_ASSIGN_OR_RETURN(on_time, pull_ranges(pull, true));
      TANDEM_ASSIGN_OR_RETURN(off_time, pull_ranges(pull, false));
    } else {
      TANDEM_ASSIGN_OR_RETURN(off_time, pull_ranges(pull, false));
      TANDEM_ASSIGN_OR_RETURN(on_time, pull_ranges(pull, true));
    }
    fused_on.push_back(on_time);
    fused_off.push_back(off_time);
    fused_vs.push_back(absl::FDivDuration(on_time, off_time) - 1.0);
    check_vs.push_back(absl::FDivDuration(check_time, elapsed));
    compute_vs.push_back(absl::FDivDuration(compute_time, elapsed));
    result.planned_post_best =
        std::min(result.planned_post_best, absl::Nanoseconds(progress.post_nanos.load()));
    if (rep % 2 == 0 && options.raw_per_copy) {
      TANDEM_ASSIGN_OR_RETURN(raw_time, RawGetLoop(*raw_worker, raw_by_rank, copies, local));
    }
    raw.push_back(raw_time);
    TANDEM_ASSIGN_OR_RETURN(const absl::Duration bulk_time, raw_bulk_loop());
    raw_bulk.push_back(bulk_time);
    copy.push_back(MemcpyLoop(source_ptrs, copies, local));
    vs_raw.push_back(absl::FDivDuration(raw.back(), elapsed));
    vs_raw_bulk.push_back(absl::FDivDuration(raw_bulk.back(), elapsed));
    vs_memcpy.push_back(absl::FDivDuration(copy.back(), elapsed));
  }
  std::sort(vs_raw.begin(), vs_raw.end());
  std::sort(vs_memcpy.begin(), vs_memcpy.end());
  std::sort(vs_raw_bulk.begin(), vs_raw_bulk.end());
  result.planned_vs_raw = vs_raw[vs_raw.size() / 2];
  result.planned_vs_raw_bulk = vs_raw_bulk[vs_raw_bulk.size() / 2];
  result.planned_vs_memcpy = vs_memcpy[vs_memcpy.size() / 2];
  std::sort(check_vs.begin(), check_vs.end());
  std::sort(compute_vs.begin(), compute_vs.end());
  result.digest_check_vs_pull = check_vs[check_vs.size() / 2];
  result.digest_compute_vs_pull = compute_vs[compute_vs.size() / 2];
  result.digest_check = Summarise(checks);
  std::sort(overlapped_vs.begin(), overlapped_vs.end());
  result.digest_overlapped_overhead = overlapped_vs[overlapped_vs.size() / 2];
  std::sort(inline_vs.begin(), inline_vs.end());
  result.digest_inline_overhead = inline_vs[inline_vs.size() / 2];
  result.pull_checked = Summarise(checked_pulls);
  std::sort(fused_vs.begin(), fused_vs.end());
  result.digest_cost_over_transfer = fused_vs[fused_vs.size() / 2];
  result.pull_digests_on = Summarise(fused_on);
  result.pull_digests_off = Summarise(fused_off);
  result.fused_check_bytes = fused_bytes;
  result.fused_check_time = fused_check_time;
  result.fused_request_time = fused_request_time;
  result.check_ranges = (num_blocks + per_range - 1) / per_range;
  result.check_ranges_overlapped = ranges_overlapped;
  result.digest_compute = Summarise(computes);
  result.planned_passes = planned;
  result.raw_passes = raw;
  result.raw_bulk_passes = raw_bulk;
  result.memcpy_passes = copy;
  result.planned = Summarise(planned);
  result.raw = Summarise(raw);
  result.raw_bulk = Summarise(raw_bulk);
  result.memcpy = Summarise(copy);
  result.source_cpu_ms = cpu_ms;
  raw_remotes.clear();
  TANDEM_ASSIGN_OR_RETURN(int exit_status, peer->Shutdown(absl::Seconds(30)));
  if (exit_status != 0) {
    return absl::InternalError(absl::StrCat("source peer exited with status ", exit_status));
  }
  return result;
}

}  // namespace tandem::bench
