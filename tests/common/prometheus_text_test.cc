// The text exposition format 0.0.4: the whole output of a small registry, escaping, and number
// formatting.
#include "common/prometheus_text.h"

#include <limits>

#include "gtest/gtest.h"

namespace tandem {
namespace {

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

  EXPECT_EQ(RenderPrometheusText(r),
            "# HELP tandem_generation_tokens_total Generated tokens.\n"
            "# TYPE tandem_generation_tokens_total counter\n"
            "tandem_generation_tokens_total 17\n"
            "# HELP tandem_request_success_total Finished requests.\n"
            "# TYPE tandem_request_success_total counter\n"
            "tandem_request_success_total{reason=\"length\"} 1\n"
            "tandem_request_success_total{reason=\"stop\"} 2\n"
            "# HELP tandem_kv_blocks_free Free blocks.\n"
            "# TYPE tandem_kv_blocks_free gauge\n"
            "tandem_kv_blocks_free 12\n"
            "# HELP tandem_ttft_seconds TTFT.\n"
            "# TYPE tandem_ttft_seconds histogram\n"
            "tandem_ttft_seconds_bucket{model=\"m\",le=\"0.01\"} 1\n"
            "tandem_ttft_seconds_bucket{model=\"m\",le=\"0.1\"} 2\n"
            "tandem_ttft_seconds_bucket{model=\"m\",le=\"+Inf\"} 3\n"
            "tandem_ttft_seconds_sum{model=\"m\"} 3.0703125\n"
            "tandem_ttft_seconds_count{model=\"m\"} 3\n");
}

TEST(PrometheusTextTest, UnlabelledHistogramHasOnlyLe) {
  MetricsRegistry r;
  Histogram* h = *r.AddHistogram("x_seconds", "x", {1});
  h->Observe(0.5);
  EXPECT_EQ(RenderPrometheusText(r),
            "# HELP x_seconds x\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"1\"} 1\n"
            "x_seconds_bucket{le=\"+Inf\"} 1\n"
            "x_seconds_sum 0.5\n"
            "x_seconds_count 1\n");
}

TEST(PrometheusTextTest, LabelledFamilyWithNoChildrenHasOnlyItsHeader) {
  MetricsRegistry r;
  ASSERT_TRUE(r.AddCounterFamily<1>("y_total", "y", {"peer"}).ok());
  EXPECT_EQ(RenderPrometheusText(r), "# HELP y_total y\n# TYPE y_total counter\n");
}

TEST(PrometheusTextTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("line \\ one\nsays \"hi\""), "line \\\\ one\\nsays \"hi\"");
  MetricsRegistry r;
  Family<Gauge, 1>* g = *r.AddGaugeFamily<1>("z", "multi\nline", {"path"});
  g->WithLabels({"C:\\x \"q\""}).Set(1);
  EXPECT_EQ(RenderPrometheusText(r),
            "# HELP z multi\\nline\n"
            "# TYPE z gauge\n"
            "z{path=\"C:\\\\x \\\"q\\\"\"} 1\n");
}

TEST(PrometheusTextTest, NumbersRoundTripShortest) {
  EXPECT_EQ(FormatPrometheusNumber(0), "0");
  EXPECT_EQ(FormatPrometheusNumber(3), "3");
  EXPECT_EQ(FormatPrometheusNumber(-2.5), "-2.5");
  EXPECT_EQ(FormatPrometheusNumber(0.1), "0.1");
  EXPECT_EQ(FormatPrometheusNumber(123456789012.0), "123456789012");
  EXPECT_EQ(FormatPrometheusNumber(1e300), "1e+300");
  EXPECT_EQ(FormatPrometheusNumber(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatPrometheusNumber(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatPrometheusNumber(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(std::stod(FormatPrometheusNumber(0.1 + 0.2)), 0.1 + 0.2);
}

TEST(PrometheusTextTest, EmptyRegistryIsEmpty) {
  MetricsRegistry r;
  EXPECT_EQ(RenderPrometheusText(r), "");
}

}  // namespace
}  // namespace tandem
