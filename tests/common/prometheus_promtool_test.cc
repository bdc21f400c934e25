// RenderPrometheusText's output passes Debian's `promtool check metrics` (the Prometheus
// project's own parser and linter), for every metric kind, labels that need escaping and the
// metric names Tandem serves; and promtool does reject broken input, so the check can fail.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/prometheus_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

struct CheckResult {
  int exit_code = -1;
  std::string output;
};

// Runs `promtool check metrics` on `text` (its stdin) and returns its exit code and output.
CheckResult PromtoolCheck(const std::string& text) {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/promtool_input_", ::getpid(), ".txt");
  {
    std::ofstream f(path);
    f << text;
  }
  const std::string cmd = absl::StrCat(TANDEM_PROMTOOL_BIN, " check metrics < ", path, " 2>&1");
  CheckResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::remove(path.c_str());
  return r;
}

TEST(PromtoolTest, RenderedRegistryPassesCheckMetrics) {
  MetricsRegistry r;
  Counter* tokens = *r.AddCounter("tandem_generation_tokens_total", "Tokens generated.");
  Family<Counter, 1>* success = *r.AddCounterFamily<1>(
      "tandem_request_success_total", "Requests finished, by finish reason.", {"finish_reason"});
  Family<Counter, 1>* bytes = *r.AddCounterFamily<1>("tandem_kv_transfer_bytes_total",
                                                     "KV bytes pulled, by peer.", {"peer"});
  ASSERT_TRUE(
      r.AddCallbackGauge("tandem_kv_blocks_free", "Free KV blocks.", [] { return 5.0; }).ok());
  Gauge* running = *r.AddGauge("tandem_num_requests_running", "Requests running.");
  Histogram* ttft = *r.AddHistogram("tandem_time_to_first_token_seconds", "Time to first token.",
                                    ExponentialBuckets(0.001, 2, 16));
  Family<Histogram, 1>* itl = *r.AddHistogramFamily<1>(
      "tandem_inter_token_latency_seconds", "Inter-token latency.", {"model"}, {0.01, 0.1, 1});

  tokens->Increment(1234);
  success->WithLabels({"stop"}).Increment(3);
  success->WithLabels({"length"}).Increment();
  bytes->WithLabels({"127.0.0.1:5001"}).Increment(1 << 20);
  bytes->WithLabels({"odd \"peer\"\\name\nline"}).Increment(7);
  running->Set(2);
  for (double v : {0.0004, 0.02, 0.5, 100.0}) ttft->Observe(v);
  itl->WithLabels({"SmolLM2"}).Observe(0.03);
  itl->WithLabels({"SmolLM2"}).Observe(std::numeric_limits<double>::infinity());

  const std::string text = RenderPrometheusText(r);
  const CheckResult check = PromtoolCheck(text);
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n--- input ---\n" << text;
  EXPECT_EQ(check.output, "") << text;
}

TEST(PromtoolTest, PromtoolRejectsWhatItShould) {
  // A lint problem (counter without _total) and a parse error: both must fail the check, or the
  // test above proves nothing.
  MetricsRegistry r;
  (*r.AddCounter("tandem_bad_counter", "No _total suffix."))->Increment();
  const CheckResult lint = PromtoolCheck(RenderPrometheusText(r));
  EXPECT_NE(lint.exit_code, 0) << lint.output;
  EXPECT_THAT(lint.output, ::testing::HasSubstr("_total"));

  const CheckResult parse = PromtoolCheck("# TYPE x counter\nx{a=\"unterminated} 1\n");
  EXPECT_NE(parse.exit_code, 0) << parse.output;
}

}  // namespace
}  // namespace tandem
