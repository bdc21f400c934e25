// transfer_bench: the KV transfer against the simplest raw ucp_get loop and memcpy, measured in
// one run on the same UCX-allocated memory and transport (docs/design.md#performance-measurement).
// The source side runs in a child process (this executable with --source_peer). RESULT lines
// (medians of per-pass ratios, each against a baseline timed in the same pass):
//   transfer_vs_raw_ucx — matched layout, shared memory, planned ÷ raw ucp_get loop (last line);
//   token_granular_<transport>_vs_raw_ucx — the token-granular scenario against the raw loop over
//     the same copy list and transport;
//   token_granular_<transport>_vs_raw_bulk — the same against raw gets of the gathered segments
//     (the same source bytes in the fewest gets: the transport's own rate for them);
//   kv_digest_check_vs_transfer / kv_digest_compute_vs_transfer — matched layout, shared memory:
//     the decode node's digest check and the prefill node's digest computation, each ÷ the
//     planned pull of the same pass (digests on = pull + check; off = pull);
//   kv_digest_overlapped_check_vs_transfer — the same pull with the overlapped check reading the
//     landed bytes back (block ranges checked on a lane while the next range is pulled), timed end
//     to end right after the plain pull: (checked ÷ plain) − 1 (what a transport that lands bytes
//     itself, TCP or RDMA gets, still costs);
//   kv_digest_cost_over_transfer — digests on vs off as the decode node pulls now: the same block
//     ranges with and without the CRC fused into the copy and the check from those CRCs, taking
//     turns going first in every pass: median of (on ÷ off) − 1 (issue 28 item 4's goal 0.03).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "bench/transfer/device_scenario.h"
#include "bench/transfer/transfer_scenario.h"
#include "kv_transfer/ucx/testing/source_peer.h"

ABSL_FLAG(bool, source_peer, false, "internal: run as the source peer process");
ABSL_FLAG(int64_t, tokens, 8192, "prompt tokens of the large transfer");
ABSL_FLAG(int64_t, short_tokens, 128, "prompt tokens of the short-prompt case");
ABSL_FLAG(int32_t, layers, 32, "model layers");
ABSL_FLAG(int32_t, kv_heads, 8, "KV heads");
ABSL_FLAG(int32_t, head_dim, 128, "head dimension");
ABSL_FLAG(int32_t, block_size, 16, "tokens per block (B)");
ABSL_FLAG(int32_t, reps, 7, "timed passes per scenario (after one warm-up pass)");
ABSL_FLAG(int32_t, max_in_flight, 1024, "UcxKvPuller get window");
ABSL_FLAG(int64_t, check_range_kib, 16 * 1024,
          "range of the overlapped digest check (DecodeNodeOptions::pull_chunk_bytes)");
ABSL_FLAG(bool, tcp, false, "also run every scenario over TCP loopback");
ABSL_FLAG(bool, shm, true, "run every scenario over shared memory");
ABSL_FLAG(bool, mapped, true,
          "puller reads pools UCX mapped (shared memory) with memcpy (false: a get per copy)");
ABSL_FLAG(int64_t, stream_copy_min_kib, 4 * 1024,
          "puller: pulls of at least this many KiB copy from mapped pools with non-temporal "
          "stores (UcxKvPullerOptions::stream_copy_min_bytes; a huge value: never)");
ABSL_FLAG(bool, gather, true, "puller gathers small copies into segment gets");
ABSL_FLAG(int64_t, segment_kib, 1024, "puller: largest gathered segment (KiB)");
ABSL_FLAG(int32_t, staging_slots, 16, "puller: staging slots (segment gets in flight)");
ABSL_FLAG(int64_t, spin_us, 100, "puller: microseconds of polling before blocking");
ABSL_FLAG(bool, raw_per_copy, true,
          "time the raw loop over the copy list (false: skip it; its figures read 0)");
ABSL_FLAG(bool, token_granular, true, "include the token-interleaved (one copy per row) case");
ABSL_FLAG(std::string, scenario, "", "run only scenarios whose name contains this");
ABSL_FLAG(bool, passes, false, "print every timed pass (ms)");
ABSL_FLAG(bool, verify, true, "verify every byte of the warm-up pull of each scenario");
ABSL_FLAG(std::string, memory, "host",
          "host: UCX-allocated host pools (the scenarios above); cuda: GPU-direct KV between two "
          "CUDA device pools, matched layout, beside cudaMemcpy D2D (needs a GPU and a "
          "CUDA-aware UCX)");
ABSL_FLAG(int32_t, device, 0, "--memory=cuda: the CUDA device both pools live on");

namespace tandem::bench {
namespace {

KvLayout Layout(int32_t tp, int32_t pcp, int32_t dcp, int32_t interleave) {
  const int32_t kv_heads = absl::GetFlag(FLAGS_kv_heads);
  return KvLayout{
      ParallelConfig{tp, pcp, dcp, absl::GetFlag(FLAGS_block_size), interleave},
      ModelDims{absl::GetFlag(FLAGS_layers), 4 * kv_heads, kv_heads, absl::GetFlag(FLAGS_head_dim)},
      KvDType::kBF16};
}

std::vector<Scenario> Scenarios() {
  const int64_t tokens = absl::GetFlag(FLAGS_tokens);
  const int32_t b = absl::GetFlag(FLAGS_block_size);
  std::vector<Scenario> out = {
      {"matched tp1->tp1", Layout(1, 1, 1, b), Layout(1, 1, 1, b), tokens},
      {"dcp2->1 (pcp2 prefill)", Layout(1, 2, 2, b), Layout(1, 1, 1, b), tokens},
      {"head merge tp2->tp1", Layout(2, 1, 1, b), Layout(1, 1, 1, b), tokens},
  };
  if (absl::GetFlag(FLAGS_token_granular)) {
    out.push_back({"token-granular dcp2 I=1->1", Layout(1, 2, 2, 1), Layout(1, 1, 1, b), tokens});
  }
  out.push_back({"short prompt matched", Layout(1, 1, 1, b), Layout(1, 1, 1, b),
                 absl::GetFlag(FLAGS_short_tokens)});
  return out;
}

double GBps(int64_t bytes, absl::Duration d) { return bytes / absl::ToDoubleSeconds(d) / 1e9; }

bool IsShort(const Scenario& sc) { return sc.tokens <= 1024; }

}  // namespace

int MainDevice(const char* self) {
  const int64_t tokens = absl::GetFlag(FLAGS_tokens);
  const int32_t b = absl::GetFlag(FLAGS_block_size);
  const Scenario sc{"matched tp1->tp1", Layout(1, 1, 1, b), Layout(1, 1, 1, b), tokens};
  ScenarioOptions options;
  options.self_executable = self;
  options.reps = absl::GetFlag(FLAGS_reps);
  options.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  options.verify = absl::GetFlag(FLAGS_verify);
  absl::StatusOr<DeviceScenarioResult> r =
      RunDeviceScenario(sc, options, absl::GetFlag(FLAGS_device));
  if (!r.ok()) {
    std::fprintf(stderr, "transfer_bench --memory=cuda: %s\n", r.status().ToString().c_str());
    return 2;
  }
  std::printf(
      "== memory cuda: %s, UCX memory types %s; %d layers, %d KV heads, head_dim %d, bf16, "
      "B=%d ==\n"
      "%-28s %5lld tok %8.1f MiB  %7lld copies\n"
      "    planned pull %6.2f GB/s (median %6.2f)  cudaMemcpy D2D %6.2f GB/s (median %6.2f)\n"
      "    first pull (connect + IPC open) %.2f ms  best pull %.3f ms over %d passes\n",
      r->device_name.c_str(), r->ucx_memory_types.c_str(), absl::GetFlag(FLAGS_layers),
      absl::GetFlag(FLAGS_kv_heads), absl::GetFlag(FLAGS_head_dim), b, sc.name.c_str(),
      static_cast<long long>(sc.tokens), r->bytes / 1048576.0, static_cast<long long>(r->copies),
      GBps(r->bytes, r->planned.best), GBps(r->bytes, r->planned.median),
      GBps(r->bytes, r->memcpy.best), GBps(r->bytes, r->memcpy.median),
      absl::ToDoubleMilliseconds(r->first_pull), absl::ToDoubleMilliseconds(r->planned.best),
      options.reps);
  std::printf("RESULT gpu_transfer_vs_memcpy=%.3f\n", r->planned_vs_memcpy);
  return 0;
}

int Main(const char* self) {
  std::vector<testing::Transport> transports;
  if (absl::GetFlag(FLAGS_shm)) transports.push_back(testing::Transport::kSharedMemory);
  if (absl::GetFlag(FLAGS_tcp)) transports.push_back(testing::Transport::kTcp);
  std::vector<std::string> results;
  std::string matched_result;  // printed last, when the matched shared-memory scenario ran
  for (testing::Transport transport : transports) {
    std::printf("== transport %s: %s, %d layers, %d KV heads, head_dim %d, bf16, B=%d ==\n",
                testing::TransportName(transport).c_str(),
                transport == testing::Transport::kTcp ? "UCX_TLS=tcp UCX_NET_DEVICES=lo"
                                                      : "UCX_TLS=sm,self",
                absl::GetFlag(FLAGS_layers), absl::GetFlag(FLAGS_kv_heads),
                absl::GetFlag(FLAGS_head_dim), absl::GetFlag(FLAGS_block_size));
    for (const Scenario& sc : Scenarios()) {
      if (!absl::StrContains(sc.name, absl::GetFlag(FLAGS_scenario))) continue;
      ScenarioOptions options;
      options.self_executable = self;
      options.transport = transport;
      // Millisecond-scale pulls are at the mercy of the scheduler on a shared 2-core machine:
      // give them more passes so best-of and median mean something.
      options.reps = absl::GetFlag(FLAGS_reps) * (IsShort(sc) ? 5 : 1);
      options.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
      options.verify = absl::GetFlag(FLAGS_verify);
      options.check_range_bytes = absl::GetFlag(FLAGS_check_range_kib) * 1024;
      options.puller.read_mapped_pools = absl::GetFlag(FLAGS_mapped);
      options.puller.stream_copy_min_bytes = absl::GetFlag(FLAGS_stream_copy_min_kib) * 1024;
      options.puller.gather_small_copies = absl::GetFlag(FLAGS_gather);
      options.puller.gather.max_segment_bytes = absl::GetFlag(FLAGS_segment_kib) * 1024;
      options.puller.staging_slots = absl::GetFlag(FLAGS_staging_slots);
      options.raw_per_copy = absl::GetFlag(FLAGS_raw_per_copy);
      options.puller.spin_before_wait = absl::Microseconds(absl::GetFlag(FLAGS_spin_us));
      absl::StatusOr<ScenarioResult> r = RunScenario(sc, options);
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", sc.name.c_str(), r.status().ToString().c_str());
        return 1;
      }
      const double planned = GBps(r->bytes, r->planned.best);
      const double raw = GBps(r->bytes, r->raw.best);
      const double copy = GBps(r->bytes, r->memcpy.best);
      std::printf(
          "%-28s %5lld tok %8.1f MiB  %7lld copies (%d src ranks, %.2f KiB avg)\n"
          "    planned %6.2f GB/s (median %6.2f)  raw ucp_get %6.2f GB/s (median %6.2f)  "
          "memcpy %6.2f GB/s\n"
          "    raw bulk %6.2f GB/s (median %6.2f; %lld segment gets, %.1f MiB read; gather plan "
          "%.1f ms)\n"
          "    planned/raw %.3f  planned/raw bulk %.3f  planned/memcpy %.3f (medians of per-pass "
          "ratios)  posting %.1f%% of best pull\n"
          "    first pull (connect + map) %.2f ms  best pull %.3f ms  source CPU %.1f ms over %d "
          "pulls\n",
          sc.name.c_str(), static_cast<long long>(sc.tokens), r->bytes / 1048576.0,
          static_cast<long long>(r->copies), r->source_ranks,
          r->bytes / 1024.0 / static_cast<double>(r->copies), planned,
          GBps(r->bytes, r->planned.median), raw, GBps(r->bytes, r->raw.median), copy,
          GBps(r->bytes, r->raw_bulk.best), GBps(r->bytes, r->raw_bulk.median),
          static_cast<long long>(r->segments), r->segment_bytes / 1048576.0,
          absl::ToDoubleMilliseconds(r->gather_plan_time), r->planned_vs_raw,
          r->planned_vs_raw_bulk, r->planned_vs_memcpy,
          100.0 * absl::ToDoubleSeconds(r->planned_post_best) /
              absl::ToDoubleSeconds(r->planned.best),
          absl::ToDoubleMilliseconds(r->first_pull), absl::ToDoubleMilliseconds(r->planned.best),
          r->source_cpu_ms, options.reps);
      std::printf(
          "    KV digests: check %.3f ms (median %.3f, %.1f%% of the pull)  compute %.3f ms "
          "(median %.3f, %.1f%% of the pull; %.2f GB/s)\n",
          absl::ToDoubleMilliseconds(r->digest_check.best),
          absl::ToDoubleMilliseconds(r->digest_check.median), 100.0 * r->digest_check_vs_pull,
          absl::ToDoubleMilliseconds(r->digest_compute.best),
          absl::ToDoubleMilliseconds(r->digest_compute.median), 100.0 * r->digest_compute_vs_pull,
          GBps(r->bytes, r->digest_compute.best));
      std::printf(
          "    KV digests overlapped (decode node): pull+check %.3f ms (median %.3f) in %lld "
          "ranges, %d checked during the pull; %+.1f%% of the pull (median of per-pass); "
          "checked inline as ranges land %+.1f%%\n",
          absl::ToDoubleMilliseconds(r->pull_checked.best),
          absl::ToDoubleMilliseconds(r->pull_checked.median),
          static_cast<long long>(r->check_ranges), r->check_ranges_overlapped,
          100.0 * r->digest_overlapped_overhead, 100.0 * r->digest_inline_overhead);
      std::printf(
          "    KV digests fused into the copy (decode node): on %.3f ms (median %.3f)  off %.3f ms "
          "(median %.3f), first of %lld ranges then the rest; %.1f MiB checked from the copy's "
          "CRCs (check %.3f ms, "
          "CRC requests %.3f ms); on/off %+.2f%% (median of per-pass)\n",
          absl::ToDoubleMilliseconds(r->pull_digests_on.best),
          absl::ToDoubleMilliseconds(r->pull_digests_on.median),
          absl::ToDoubleMilliseconds(r->pull_digests_off.best),
          absl::ToDoubleMilliseconds(r->pull_digests_off.median),
          static_cast<long long>(r->check_ranges), r->fused_check_bytes / 1048576.0,
          absl::ToDoubleMilliseconds(r->fused_check_time),
          absl::ToDoubleMilliseconds(r->fused_request_time), 100.0 * r->digest_cost_over_transfer);
      if (absl::GetFlag(FLAGS_passes)) {
        for (size_t i = 0; i < r->planned_passes.size(); ++i) {
          std::printf(
              "      pass %zu: planned %.3f ms  raw %.3f ms  raw bulk %.3f ms  memcpy %.3f ms\n", i,
              absl::ToDoubleMilliseconds(r->planned_passes[i]),
              absl::ToDoubleMilliseconds(r->raw_passes[i]),
              absl::ToDoubleMilliseconds(r->raw_bulk_passes[i]),
              absl::ToDoubleMilliseconds(r->memcpy_passes[i]));
        }
      }
      std::fflush(stdout);
      if (transport == testing::Transport::kSharedMemory && sc.name == "matched tp1->tp1" &&
          options.raw_per_copy) {
        matched_result = absl::StrFormat("RESULT transfer_vs_raw_ucx=%.3f", r->planned_vs_raw);
      }
      if (transport == testing::Transport::kSharedMemory && sc.name == "matched tp1->tp1") {
        results.push_back(
            absl::StrFormat("RESULT kv_digest_check_vs_transfer=%.4f", r->digest_check_vs_pull));
        results.push_back(absl::StrFormat("RESULT kv_digest_compute_vs_transfer=%.4f",
                                          r->digest_compute_vs_pull));
        results.push_back(absl::StrFormat("RESULT kv_digest_overlapped_check_vs_transfer=%.4f",
                                          r->digest_overlapped_overhead));
        results.push_back(absl::StrFormat("RESULT kv_digest_inline_check_vs_transfer=%.4f",
                                          r->digest_inline_overhead));
        results.push_back(absl::StrFormat("RESULT kv_digest_cost_over_transfer=%.4f",
                                          r->digest_cost_over_transfer));
      }
      if (absl::StartsWith(sc.name, "token-granular")) {
        const std::string t = transport == testing::Transport::kTcp ? "tcp" : "shm";
        if (options.raw_per_copy) {
          results.push_back(
              absl::StrFormat("RESULT token_granular_%s_vs_raw_ucx=%.3f", t, r->planned_vs_raw));
        }
        results.push_back(absl::StrFormat("RESULT token_granular_%s_vs_raw_bulk=%.3f", t,
                                          r->planned_vs_raw_bulk));
      }
    }
  }
  for (const std::string& line : results) std::printf("%s\n", line.c_str());
  if (!matched_result.empty()) std::printf("%s\n", matched_result.c_str());
  return 0;
}

}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string memory = absl::GetFlag(FLAGS_memory);
  if (memory != "host" && memory != "cuda") {
    std::fprintf(stderr, "transfer_bench: --memory must be host or cuda (got '%s')\n",
                 memory.c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_source_peer)) {
    if (memory == "cuda") return tandem::bench::RunDeviceSourcePeer(absl::GetFlag(FLAGS_device));
    return tandem::testing::RunSourcePeer(tandem::testing::kPeerInFd, tandem::testing::kPeerOutFd);
  }
  if (memory == "cuda") return tandem::bench::MainDevice("/proc/self/exe");
  return tandem::bench::Main("/proc/self/exe");
}
