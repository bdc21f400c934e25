// transfer_bench: the KV transfer against the simplest raw ucp_get loop and memcpy, measured in
// one run on the same UCX-allocated memory and transport (DESIGN.md §8). The source side runs
// in a child process (this executable with --source_peer). Last line:
//   RESULT transfer_vs_raw_ucx=<planned GB/s ÷ raw GB/s, matched layout, shared memory>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
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
ABSL_FLAG(bool, tcp, false, "also run every scenario over TCP loopback");
ABSL_FLAG(bool, token_granular, true, "include the token-interleaved (one copy per row) case");
ABSL_FLAG(std::string, scenario, "", "run only scenarios whose name contains this");
ABSL_FLAG(bool, passes, false, "print every timed pass (ms)");
ABSL_FLAG(bool, verify, true, "verify every byte of the warm-up pull of each scenario");

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

int Main(const char* self) {
  std::vector<testing::Transport> transports = {testing::Transport::kSharedMemory};
  if (absl::GetFlag(FLAGS_tcp)) transports.push_back(testing::Transport::kTcp);
  double result = 0;
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
      absl::StatusOr<ScenarioResult> r = RunScenario(sc, options);
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", sc.name.c_str(), r.status().ToString().c_str());
        return 1;
      }
      const double planned = GBps(r->bytes, r->planned.best);
      const double raw = GBps(r->bytes, r->raw.best);
      const double copy = GBps(r->bytes, r->memcpy.best);
      std::printf(
          "%-28s %5lld tok %8.1f MiB  %7lld copies (%d src ranks, %.0f KiB avg)\n"
          "    planned %6.2f GB/s (median %6.2f)  raw ucp_get %6.2f GB/s (median %6.2f)  "
          "memcpy %6.2f GB/s\n"
          "    planned/raw %.3f  planned/memcpy %.3f (medians of per-pass ratios)  posting %.1f%% "
          "of best pull\n"
          "    first pull (connect + map) %.2f ms  best pull %.3f ms  source CPU %.1f ms over %d "
          "pulls\n",
          sc.name.c_str(), static_cast<long long>(sc.tokens), r->bytes / 1048576.0,
          static_cast<long long>(r->copies), r->source_ranks,
          r->bytes / 1024.0 / static_cast<double>(r->copies), planned,
          GBps(r->bytes, r->planned.median), raw, GBps(r->bytes, r->raw.median), copy,
          r->planned_vs_raw, r->planned_vs_memcpy,
          100.0 * absl::ToDoubleSeconds(r->planned_post_best) /
              absl::ToDoubleSeconds(r->planned.best),
          absl::ToDoubleMilliseconds(r->first_pull), absl::ToDoubleMilliseconds(r->planned.best),
          r->source_cpu_ms, options.reps);
      if (absl::GetFlag(FLAGS_passes)) {
        for (size_t i = 0; i < r->planned_passes.size(); ++i) {
          std::printf("      pass %zu: planned %.3f ms  raw %.3f ms  memcpy %.3f ms\n", i,
                      absl::ToDoubleMilliseconds(r->planned_passes[i]),
                      absl::ToDoubleMilliseconds(r->raw_passes[i]),
                      absl::ToDoubleMilliseconds(r->memcpy_passes[i]));
        }
      }
      std::fflush(stdout);
      if (transport == testing::Transport::kSharedMemory && sc.name == "matched tp1->tp1") {
        result = r->planned_vs_raw;
      }
    }
  }
  std::printf("RESULT transfer_vs_raw_ucx=%.3f\n", result);  // matched, shared memory
  return 0;
}

}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_source_peer)) {
    return tandem::testing::RunSourcePeer(tandem::testing::kPeerInFd, tandem::testing::kPeerOutFd);
  }
  return tandem::bench::Main("/proc/self/exe");
}
