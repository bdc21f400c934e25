// The text exposition format 0.0.4 as prometheus-cpp's serializer writes a MetricsRegistry: the
// whole output of a small registry (label names sorted, children in any order), escaping and
// numbers.
#include "common/prometheus_text.h"

#include <iterator>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

TEST(PrometheusTextTest, RendersEveryKindExactly) {
  MetricsRegistry r;
  Counter* tokens = *r.AddCounter("tandem_generation_tokens_total", "Generated tokens.");
  Family<Counter, 1>* success =
      *r.AddCounterFamily<1>("tandem_request_success_total", "Finished requests.", {"reason"});
  ASSERT_TRUE(
      r.AddCallbackGauge("tandem_kv_blocks_free", "Free blocks.", [] { return 12.0; }).ok());
  Family<Histogram, 1>* ttft =
      *r.AddHistogramFamily<1>("tandem_ttft_seconds", "TTFT.", {"model"}, {0.01, 0.1});
  tokens->Increment(17);
  success->WithLabels({"stop"}).Increment(2);
  success->WithLabels({"length"}).Increment();
  ttft->WithLabels({"m"}).Observe(0.0078125);
  ttft->WithLabels({"m"}).Observe(0.0625);
  ttft->WithLabels({"m"}).Observe(3);

  const std::string text = RenderPrometheusText(r);
  // Children of a labelled family come in prometheus-cpp's (hash) order: check the two lines
  // apart, then the rest verbatim.
  EXPECT_THAT(text, HasSubstr("\ntandem_request_success_total{reason=\"length\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\ntandem_request_success_total{reason=\"stop\"} 2\n"));
  std::string rest = text;
  for (const char* line : {"tandem_request_success_total{reason=\"length\"} 1\n",
                           "tandem_request_success_total{reason=\"stop\"} 2\n"}) {
    rest.erase(rest.find(line), std::string(line).size());
  }
  EXPECT_EQ(rest,
            "# HELP tandem_generation_tokens_total Generated tokens.\n"
            "# TYPE tandem_generation_tokens_total counter\n"
            "tandem_generation_tokens_total 17\n"
            "# HELP tandem_request_success_total Finished requests.\n"
            "# TYPE tandem_request_success_total counter\n"
            "# HELP tandem_kv_blocks_free Free blocks.\n"
            "# TYPE tandem_kv_blocks_free gauge\n"
            "tandem_kv_blocks_free 12\n"
            "# HELP tandem_ttft_seconds TTFT.\n"
            "# TYPE tandem_ttft_seconds histogram\n"
            "tandem_ttft_seconds_count{model=\"m\"} 3\n"
            "tandem_ttft_seconds_sum{model=\"m\"} 3.0703125\n"
            "tandem_ttft_seconds_bucket{model=\"m\",le=\"0.01\"} 1\n"
            "tandem_ttft_seconds_bucket{model=\"m\",le=\"0.1\"} 2\n"
            "tandem_ttft_seconds_bucket{model=\"m\",le=\"+Inf\"} 3\n");
}

TEST(PrometheusTextTest, LabelNamesAreSorted) {
  MetricsRegistry r;
  Family<Counter, 2>* f = *r.AddCounterFamily<2>("h_total", "h", {"status", "endpoint"});
  f->WithLabels({"200", "/v1/models"}).Increment();
  EXPECT_THAT(RenderPrometheusText(r),
              HasSubstr("h_total{endpoint=\"/v1/models\",status=\"200\"} 1\n"));
}

TEST(PrometheusTextTest, UnlabelledHistogramHasOnlyLe) {
  MetricsRegistry r;
  Histogram* h = *r.AddHistogram("x_seconds", "x", {1});
  h->Observe(0.5);
  EXPECT_EQ(RenderPrometheusText(r),
            "# HELP x_seconds x\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_count 1\n"
            "x_seconds_sum 0.5\n"
            "x_seconds_bucket{le=\"1\"} 1\n"
            "x_seconds_bucket{le=\"+Inf\"} 1\n");
}

TEST(PrometheusTextTest, LabelledFamilyWithNoChildrenIsLeftOut) {
  MetricsRegistry r;
  ASSERT_TRUE(r.AddCounterFamily<1>("y_total", "y", {"peer"}).ok());
  EXPECT_EQ(RenderPrometheusText(r), "");
}

TEST(PrometheusTextTest, EscapesLabelValues) {
  MetricsRegistry r;
  Family<Gauge, 1>* g = *r.AddGaugeFamily<1>("z", "one line", {"path"});
  g->WithLabels({"C:\\x \"q\"\nz"}).Set(1);
  EXPECT_EQ(RenderPrometheusText(r),
            "# HELP z one line\n"
            "# TYPE z gauge\n"
            "z{path=\"C:\\\\x \\\"q\\\"\\nz\"} 1\n");
}

// Numbers read back to within a few ulps (prometheus-cpp writes 16 significant digits);
// infinities as Prometheus spells them.
TEST(PrometheusTextTest, NumbersReadBack) {
  const double values[] = {0, 3, -2.5, 0.1, 123456789012.0, 1e300, 0.1 + 0.2};
  MetricsRegistry r;
  Family<Gauge, 1>* g = *r.AddGaugeFamily<1>("v", "v", {"i"});
  for (size_t i = 0; i < std::size(values); ++i) g->WithLabels({std::to_string(i)}).Set(values[i]);
  g->WithLabels({"inf"}).Set(std::numeric_limits<double>::infinity());
  g->WithLabels({"-inf"}).Set(-std::numeric_limits<double>::infinity());
  const std::string text = RenderPrometheusText(r);
  for (size_t i = 0; i < std::size(values); ++i) {
    const std::string head = "v{i=\"" + std::to_string(i) + "\"} ";
    const size_t at = text.find(head);
    ASSERT_NE(at, std::string::npos) << head;
    EXPECT_DOUBLE_EQ(std::stod(text.substr(at + head.size())), values[i]) << text;
  }
  EXPECT_THAT(text, HasSubstr("v{i=\"inf\"} +Inf\n"));
  EXPECT_THAT(text, HasSubstr("v{i=\"-inf\"} -Inf\n"));
}

TEST(PrometheusTextTest, EmptyRegistryIsEmpty) {
  MetricsRegistry r;
  EXPECT_EQ(RenderPrometheusText(r), "");
}

}  // namespace
}  // namespace tandem
