// n > 1 from one prefill, measured (issue 24 item 4, docs/router.md#n-choices-from-one-prefill):
// a real local cluster (router + prefill tp 3 + decode tp 1 processes, the real model) serves the
// same 1,000-token prompt with n = 1 and then n = 4, and the decode node's own counters say what
// each request cost it — KV bytes pulled from the prefill (tandem_kv_transfer_bytes_total) and KV
// blocks taken (tandem_kv_decode_blocks_allocated_total), read before and after each request.
//
//   RESULT n4_kv_bytes_over_n1=<x>        (1: the prompt's KV crosses the wire once)
//   RESULT n4_decode_blocks_over_n1=<y>   (far below 4: the choices share the prompt's blocks)
//
// Usage: n_choices_bench [--model=PATH (default $TANDEM_MODEL)] [--prompt_tokens=1000] [--n=4]
//        [--max_tokens=16]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/metrics_scrape.h"

ABSL_FLAG(std::string, model, "", "GGUF model (default: $TANDEM_MODEL)");
ABSL_FLAG(int32_t, prompt_tokens, 1000, "prompt length in tokens");
ABSL_FLAG(int32_t, n, 4, "choices of the second request");
ABSL_FLAG(int32_t, max_tokens, 16, "tokens each choice generates (ignore_eos)");

namespace tandem {
namespace {

struct Counters {
  double kv_bytes = 0;
  double blocks = 0;
};

// The decode node's counters now (every peer's transfer bytes summed).
absl::StatusOr<Counters> Read(const std::string& url) {
  absl::StatusOr<std::map<std::string, double>> m = testing::ScrapeMetrics(url);
  if (!m.ok()) return m.status();
  Counters c;
  for (const auto& [series, value] : *m) {
    if (absl::StartsWith(series, "tandem_kv_transfer_bytes_total")) c.kv_bytes += value;
    if (series == "tandem_kv_decode_blocks_allocated_total") c.blocks = value;
  }
  return c;
}

// One request of `n` choices; what it cost the decode node.
absl::StatusOr<Counters> Measure(testing::LocalCluster& cluster, const std::string& url,
                                 int32_t n) {
  absl::StatusOr<Counters> before = Read(url);
  if (!before.ok()) return before.status();
  v1::GenerateRequest req =
      testing::IdsRequest(testing::RandomPrompt(absl::GetFlag(FLAGS_prompt_tokens), 24),
                          absl::GetFlag(FLAGS_max_tokens));
  req.set_n(n);
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(24);
  const testing::GenerateOutcome out = cluster.Generate(req, absl::Minutes(5));
  if (!out.status.ok()) {
    return absl::InternalError(absl::StrCat("n=", n, ": ", out.status.error_message()));
  }
  const int32_t expected = n * absl::GetFlag(FLAGS_max_tokens);
  if (out.final.usage().completion_tokens() != expected) {
    return absl::InternalError(absl::StrCat("n=", n, ": ", out.final.usage().completion_tokens(),
                                            " tokens, expected ", expected));
  }
  if (absl::Status idle = cluster.WaitIdle(absl::Seconds(30)); !idle.ok()) return idle;
  absl::StatusOr<Counters> after = Read(url);
  if (!after.ok()) return after.status();
  return Counters{after->kv_bytes - before->kv_bytes, after->blocks - before->blocks};
}

int Run() {
  std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty() && std::getenv("TANDEM_MODEL") != nullptr) model = std::getenv("TANDEM_MODEL");
  if (model.empty()) {
    std::fprintf(stderr, "n_choices_bench: no model (--model or TANDEM_MODEL)\n");
    return 2;
  }
  testing::ClusterSpec spec;
  spec.model_path = model;
  spec.prefill = {testing::NodeSpec{{"--tp=3", "--kv_budget_mb=256"}}};
  spec.decode = {testing::NodeSpec{{"--tp=1", "--kv_budget_mb=256"}}};
  absl::StatusOr<std::unique_ptr<testing::LocalCluster>> cluster =
      testing::LocalCluster::Start(spec, absl::Minutes(4));
  if (!cluster.ok()) {
    std::fprintf(stderr, "n_choices_bench: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::string> url = testing::MetricsUrlInLog((*cluster)->Log("decode", 0));
  if (!url.ok()) {
    std::fprintf(stderr, "n_choices_bench: %s\n", url.status().ToString().c_str());
    return 1;
  }
  const int32_t n = absl::GetFlag(FLAGS_n);
  absl::StatusOr<Counters> one = Measure(**cluster, *url, 1);
  absl::StatusOr<Counters> many = one.ok() ? Measure(**cluster, *url, n) : one;
  if (!many.ok()) {
    std::fprintf(stderr, "n_choices_bench: %s\n%s\n", many.status().ToString().c_str(),
                 (*cluster)->LogTails().c_str());
    return 1;
  }
  if (one->kv_bytes <= 0 || one->blocks <= 0) {
    std::fprintf(stderr, "n_choices_bench: the n=1 request moved no KV (%.0f bytes, %.0f blocks)\n",
                 one->kv_bytes, one->blocks);
    return 1;
  }
  std::printf("prompt %d tokens, %d tokens a choice, prefill tp 3 -> decode tp 1\n",
              absl::GetFlag(FLAGS_prompt_tokens), absl::GetFlag(FLAGS_max_tokens));
  std::printf("RESULT n1_kv_bytes=%.0f\nRESULT n%d_kv_bytes=%.0f\n", one->kv_bytes, n,
              many->kv_bytes);
  std::printf("RESULT n1_decode_blocks=%.0f\nRESULT n%d_decode_blocks=%.0f\n", one->blocks, n,
              many->blocks);
  std::printf("RESULT n%d_kv_bytes_over_n1=%.3f\n", n, many->kv_bytes / one->kv_bytes);
  std::printf("RESULT n%d_decode_blocks_over_n1=%.3f\n", n, many->blocks / one->blocks);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::Run();
}
