// router_capacity_bench (issue 27 item 8): how many concurrent streams, and how many relayed
// tokens per second, one real tandem-router process carries before it adds more than
// --p99_budget_ms of p99 latency to the tokens it relays, over gRPC and over HTTP/SSE.
//
// Fake prefill and decode nodes in this process (timed_nodes.h) emit every stream's tokens at
// --rate tokens/s; the router (a child process, pinned with --router_cpus) relays them to the
// clients here (capacity_clients.h). Added latency of a token = the time this process received
// it - the time the fake node emitted it (one clock). The bench ramps --steps of concurrent
// streams per transport and stops a transport at the first step whose p99 exceeds the budget or
// where a stream failed (--keep_going runs the rest of the steps too, for the curve). A step's
// streams start evenly over --spread_s (a ramp: N streams arrive at N/spread per second) and
// each lasts --step_s; the step's relay rate is measured while all N run. Prints one STEP line
// per step -- p99 of the first tokens (prefill and call set-up included) and of the rest apart,
// and what the router's thread per request costs: its threads, its context switches per relayed
// token (every thread's, from /proc), its CPU µs per token and its resident memory -- then per
// transport
//   RESULT <transport>_max_streams=N       (largest step within budget, 0 if none)
//   RESULT <transport>_tokens_per_s=X      (tokens relayed per second at that step, all running)
// measured in this run. The clients and fake nodes share the machine with the router: on a
// 2-core machine their own CPU time is part of what is measured. Transport `direct` is their
// floor: the clients make the router's node calls themselves (Prefill, then Decode), no router.
//
//   router_capacity_bench [--transports=direct,grpc,http] [--steps=250,500,1000,2000,3000]
//                         [--rate=10] [--step_s=8] [--spread_s=1] [--router_cpus=0,1]
//                         [--model=GGUF]
#include <curl/curl.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/router/capacity_clients.h"
#include "bench/router/router_process.h"
#include "bench/router/timed_nodes.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, router_bin, TANDEM_ROUTER_BIN, "the tandem-router binary");
ABSL_FLAG(std::string, model, "", "GGUF whose tokenizer the router loads (default $TANDEM_MODEL)");
ABSL_FLAG(std::string, transports, "direct,grpc,http",
          "any of direct (no router: the bench's floor), grpc, http");
ABSL_FLAG(std::string, steps, "250,500,1000,2000,3000", "concurrent streams, ascending");
ABSL_FLAG(double, rate, 10, "tokens per second each fake stream emits");
ABSL_FLAG(double, step_s, 8, "seconds each stream lasts (tokens = rate * step_s)");
ABSL_FLAG(double, spread_s, 1,
          "seconds over which a step's streams start (0: one emission period, 1/rate)");
ABSL_FLAG(double, p99_budget_ms, 20, "largest added p99 latency a step may have");
ABSL_FLAG(std::string, router_cpus, "", "taskset CPU list for the router (empty: not pinned)");
ABSL_FLAG(bool, keep_going, false, "run every step even after one over budget (for the curve)");

namespace tandem::bench {
namespace {

constexpr char kModel[] = "capacity-bench";

struct StepReport {
  int streams = 0;
  int failed = 0;
  int64_t tokens = 0;
  // Tokens relayed per second while every stream of the step ran (from the last stream's first
  // token to the first stream's last): the relay rate at `streams` concurrent streams.
  double tokens_per_s = 0;
  double mean_tokens_per_s = 0;  // over the whole step (first token to last), ramp included
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  // The same, of each stream's first token (prefill and call set-up included) and of the rest
  // (the relay alone): a step's p99 can be its first tokens' (starts come in one burst).
  double first_p99_ms = 0;
  double rest_p99_ms = 0;
  double router_cores = 0;  // router CPU seconds / wall seconds
  double bench_cores = 0;   // this process's (clients + fake nodes) CPU seconds / wall seconds
  int router_threads = 0;   // most seen while the step ran
  // The router's context switches per relayed token: every thread's switches while the step
  // ran (threads sampled once a second, so a thread's last < 1 s before it exits is missed).
  double switches_per_token = 0;
  int64_t router_rss_kb = 0;  // most resident memory seen while the step ran
  std::string first_error;
};

// User + system CPU seconds of this process so far.
double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// The id of the token that "a" tokenizes to, from the router's /tokenize.
absl::StatusOr<int32_t> AsciiToken(int http_port) {
  CURL* curl = curl_easy_init();
  const std::string url = absl::StrCat("http://127.0.0.1:", http_port, "/tokenize");
  const std::string body =
      nlohmann::json{{"model", kModel}, {"prompt", "a"}, {"add_special_tokens", false}}.dump();
  std::string reply;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* out) {
        static_cast<std::string*>(out)->append(d, s * n);
        return s * n;
      });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  const nlohmann::json j = nlohmann::json::parse(reply, nullptr, false);
  if (rc != CURLE_OK || !j.is_object() || !j.contains("tokens") || j["tokens"].size() != 1 ||
      !j["tokens"][0].is_number_integer()) {
    return absl::UnavailableError(absl::StrCat("/tokenize answered '", reply, "'"));
  }
  return j["tokens"][0].get<int32_t>();
}

StepReport RunStep(const std::string& transport, const LoadSpec& spec, const RouterProcess& router,
                   EmitLog& log) {
  StepReport report;
  report.streams = spec.streams;
  std::atomic<int> most_threads{0};
  std::atomic<int64_t> most_rss{0};
  // Each thread's switches: at the step's start (baseline) and the last sample seen.
  const std::map<int, int64_t> switches0 = router.ThreadSwitches();
  std::map<int, int64_t> switches_seen;
  absl::Notification stop;
  std::thread sampler([&] {
    // Sampling the router's threads, switches and memory once a second while the step runs.
    do {
      most_threads = std::max(most_threads.load(), router.Threads());
      most_rss = std::max(most_rss.load(), router.RssKb());
      for (const auto& [tid, n] : router.ThreadSwitches()) switches_seen[tid] = n;
    } while (!stop.WaitForNotificationWithTimeout(absl::Seconds(1)));
  });
  const double cpu0 = router.CpuSeconds();
  const double self0 = SelfCpuSeconds();
  const absl::Time t0 = absl::Now();
  const std::vector<StreamResult> results = transport == "grpc"     ? RunGrpcStreams(spec)
                                            : transport == "direct" ? RunDirectStreams(spec)
                                                                    : RunHttpStreams(spec);
  const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
  report.router_cores = (router.CpuSeconds() - cpu0) / wall;
  report.bench_cores = (SelfCpuSeconds() - self0) / wall;
  stop.Notify();
  sampler.join();
  report.router_threads = most_threads;
  report.router_rss_kb = most_rss;
  int64_t switches = 0;
  for (const auto& [tid, n] : switches_seen) {
    const auto before = switches0.find(tid);
    switches += n - (before != switches0.end() ? before->second : 0);
  }
  std::vector<double> added_ms;
  std::vector<double> first_ms;
  std::vector<double> rest_ms;
  absl::Time first = absl::InfiniteFuture();
  absl::Time last = absl::InfinitePast();
  for (const StreamResult& r : results) {
    const std::vector<absl::Time> emitted = log.Take(r.client_id);
    if (!r.ok) {
      if (report.failed++ == 0) report.first_error = r.error;
      continue;
    }
    report.tokens += static_cast<int64_t>(r.token_times.size());
    for (size_t k = 0; k < r.token_times.size() && k < emitted.size(); ++k) {
      added_ms.push_back(absl::ToDoubleMilliseconds(r.token_times[k] - emitted[k]));
      (k == 0 ? first_ms : rest_ms).push_back(added_ms.back());
      first = std::min(first, r.token_times[k]);
      last = std::max(last, r.token_times[k]);
    }
  }
  if (last > first) {
    report.mean_tokens_per_s = report.tokens / absl::ToDoubleSeconds(last - first);
  }
  // The plateau: every stream had its first token and none had its last yet.
  absl::Time all_running = absl::InfinitePast();
  absl::Time first_ended = absl::InfiniteFuture();
  for (const StreamResult& r : results) {
    if (!r.ok || r.token_times.empty()) continue;
    all_running = std::max(all_running, r.token_times.front());
    first_ended = std::min(first_ended, r.token_times.back());
  }
  if (first_ended > all_running) {
    int64_t in_plateau = 0;
    for (const StreamResult& r : results) {
      if (!r.ok) continue;
      for (const absl::Time t : r.token_times) in_plateau += t >= all_running && t < first_ended;
    }
    report.tokens_per_s =
        static_cast<double>(in_plateau) / absl::ToDoubleSeconds(first_ended - all_running);
  }
  report.p50_ms = Percentile(added_ms, 0.50);
  report.p99_ms = Percentile(added_ms, 0.99);
  report.first_p99_ms = Percentile(first_ms, 0.99);
  report.rest_p99_ms = Percentile(rest_ms, 0.99);
  report.max_ms = added_ms.empty() ? 0 : *std::max_element(added_ms.begin(), added_ms.end());
  if (report.tokens > 0) {
    report.switches_per_token = static_cast<double>(switches) / static_cast<double>(report.tokens);
  }
  return report;
}

int Main() {
  std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty() && std::getenv("TANDEM_MODEL") != nullptr) model = std::getenv("TANDEM_MODEL");
  if (model.empty()) {
    std::fprintf(stderr, "router_capacity_bench: --model or $TANDEM_MODEL is required\n");
    return 2;
  }
  std::vector<int> steps;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_steps), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      std::fprintf(stderr, "router_capacity_bench: bad --steps entry '%s'\n",
                   std::string(s).c_str());
      return 2;
    }
    steps.push_back(n);
  }
  const double rate = absl::GetFlag(FLAGS_rate);
  const double step_s = absl::GetFlag(FLAGS_step_s);
  const int tokens = std::max(2, static_cast<int>(rate * step_s));
  curl_global_init(CURL_GLOBAL_DEFAULT);

  EmitLog log;
  std::atomic<int32_t> token{0};
  TimedPrefill prefill(kModel, &token, &log);
  TimedDecode decode(kModel, &token, absl::Seconds(1.0 / rate), &log);
  absl::StatusOr<std::unique_ptr<RouterProcess>> router = RouterProcess::Start(
      absl::GetFlag(FLAGS_router_bin),
      {absl::StrCat("--model=", model), absl::StrCat("--served_model_name=", kModel),
       absl::StrCat("--prefill=", prefill.address()), absl::StrCat("--decode=", decode.address()),
       "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0", "--health_interval_ms=500",
       "--max_requests_in_flight=0", "--max_concurrent_streams=0", "--http_threads=16384"},
      absl::GetFlag(FLAGS_router_cpus));
  if (!router.ok()) {
    std::fprintf(stderr, "router_capacity_bench: %s\n", router.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<int32_t> ascii = AsciiToken((*router)->http_port());
  if (!ascii.ok()) {
    std::fprintf(stderr, "router_capacity_bench: %s\n", ascii.status().ToString().c_str());
    return 1;
  }
  token = *ascii;
  std::printf(
      "router_capacity_bench: rate=%.1f tok/s per stream, %d tokens per stream, "
      "budget p99 %.1f ms, router cpus '%s', token id %d\n",
      rate, tokens, absl::GetFlag(FLAGS_p99_budget_ms), absl::GetFlag(FLAGS_router_cpus).c_str(),
      *ascii);

  int run = 0;
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_transports), ',')) {
    const std::string transport(t);
    if (transport != "grpc" && transport != "http" && transport != "direct") {
      std::fprintf(stderr, "router_capacity_bench: unknown transport '%s'\n", transport.c_str());
      return 2;
    }
    LoadSpec spec;
    spec.target = transport == "grpc" ? absl::StrCat("127.0.0.1:", (*router)->grpc_port())
                  : transport == "direct"
                      ? decode.address()
                      : absl::StrCat("http://127.0.0.1:", (*router)->http_port());
    spec.prefill_target = prefill.address();
    spec.model = kModel;
    spec.tokens = tokens;
    const double spread_s = absl::GetFlag(FLAGS_spread_s);
    spec.spread = absl::Seconds(spread_s > 0 ? spread_s : 1.0 / rate);
    spec.timeout = absl::Seconds(step_s * 3 + 30);
    // Warm-up: connections, node health, the first request's lazy set-up.
    spec.streams = 4;
    spec.id_prefix = absl::StrCat("warm-", transport, "-");
    RunStep(transport, spec, **router, log);
    StepReport best;
    bool over_budget = false;
    for (const int n : steps) {
      spec.streams = n;
      spec.id_prefix = absl::StrCat("r", run++, "-", transport, "-");
      const StepReport r = RunStep(transport, spec, **router, log);
      const bool pass = r.failed == 0 && r.p99_ms <= absl::GetFlag(FLAGS_p99_budget_ms);
      std::printf(
          "STEP transport=%s streams=%d failed=%d tokens=%lld tokens_per_s=%.0f "
          "mean_tokens_per_s=%.0f "
          "added_p50_ms=%.2f added_p99_ms=%.2f added_max_ms=%.1f first_token_p99_ms=%.2f "
          "later_tokens_p99_ms=%.2f router_cores=%.2f "
          "bench_cores=%.2f router_threads=%d router_switches_per_token=%.2f router_rss_mb=%.0f "
          "router_cpu_us_per_token=%.1f pass=%s%s%s\n",
          transport.c_str(), r.streams, r.failed, static_cast<long long>(r.tokens), r.tokens_per_s,
          r.mean_tokens_per_s, r.p50_ms, r.p99_ms, r.max_ms, r.first_p99_ms, r.rest_p99_ms,
          r.router_cores, r.bench_cores, r.router_threads, r.switches_per_token,
          static_cast<double>(r.router_rss_kb) / 1024.0,
          r.mean_tokens_per_s > 0 ? r.router_cores / r.mean_tokens_per_s * 1e6 : 0.0,
          pass ? "yes" : "no", r.first_error.empty() ? "" : " first_error=", r.first_error.c_str());
      std::fflush(stdout);
      // The result is the last step within budget before the first one over it.
      if (pass && !over_budget) best = r;
      if (!pass) {
        over_budget = true;
        if (!absl::GetFlag(FLAGS_keep_going)) break;
      }
    }
    std::printf(
        "RESULT %s_max_streams=%d\nRESULT %s_tokens_per_s=%.0f\nRESULT %s_added_p99_ms=%.2f\n",
        transport.c_str(), best.streams, transport.c_str(), best.tokens_per_s, transport.c_str(),
        best.p99_ms);
    std::fflush(stdout);
  }
  curl_global_cleanup();
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As tandem-router does (router/main.cc): the fake nodes and clients share the router's cores,
  // and Debian's abseil would otherwise track every lock in its global deadlock graph.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return tandem::bench::Main();
}
