// MetricsRegistry and the metric types: values, histogram buckets, label families, validation
// of names and bounds, and concurrent updates.
#include "common/metrics.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CounterTest, OnlyGoesUp) {
  Counter c;
  EXPECT_EQ(c.value(), 0.0);
  c.Increment();
  c.Increment(2.5);
  c.Increment(-4);
  c.Increment(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(c.value(), 3.5);
}

TEST(GaugeTest, SetAndAdd) {
  Gauge g;
  g.Set(7);
  g.Add(-2);
  g.Add(0.5);
  EXPECT_EQ(g.value(), 5.5);
}

TEST(HistogramTest, BucketsAreLessOrEqualAndCumulative) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.2, 1.0, 5.0, 50.0, 50.0}) h.Observe(v);
  h.Observe(std::numeric_limits<double>::quiet_NaN());
  const HistogramSnapshot s = h.Snapshot();
  EXPECT_THAT(s.bounds, ElementsAre(0.1, 1, 10));
  // <=0.1: 0.05, 0.1; <=1: + 0.2, 1.0; <=10: + 5.0; +Inf: + 50, 50.
  EXPECT_THAT(s.cumulative, ElementsAre(2u, 4u, 5u, 7u));
  EXPECT_EQ(s.count, 7u);
  EXPECT_DOUBLE_EQ(s.sum, 0.05 + 0.1 + 0.2 + 1.0 + 5.0 + 50.0 + 50.0);
}

TEST(HistogramTest, NoBoundsMeansOnlyInf) {
  Histogram h({});
  h.Observe(-3);
  h.Observe(3);
  const HistogramSnapshot s = h.Snapshot();
  EXPECT_THAT(s.cumulative, ElementsAre(2u));
  EXPECT_EQ(s.sum, 0.0);
}

TEST(MetricsRegistryTest, CollectsInRegistrationOrderWithLabelsSorted) {
  MetricsRegistry r;
  absl::StatusOr<Counter*> tokens = r.AddCounter("t_tokens_total", "tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  absl::StatusOr<Family<Counter, 2>*> bytes =
      r.AddCounterFamily<2>("t_bytes_total", "bytes", {"peer", "dir"});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(r.AddCallbackGauge("t_free", "free", [] { return 42.0; }).ok());
  double expired = 0;
  ASSERT_TRUE(r.AddCallbackCounter("t_expired_total", "expired", [&] { return expired; }).ok());
  absl::StatusOr<Histogram*> lat = r.AddHistogram("t_latency_seconds", "latency", {1, 2});
  ASSERT_TRUE(lat.ok()) << lat.status();

  (*tokens)->Increment(3);
  (*bytes)->WithLabels({"b:1", "in"}).Increment(10);
  (*bytes)->WithLabels({"a:1", "in"}).Increment(5);
  (*bytes)->WithLabels({"b:1", "in"}).Increment(1);
  (*lat)->Observe(1.5);
  expired = 9;

  const std::vector<FamilySnapshot> f = r.Collect();
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].name, "t_tokens_total");
  EXPECT_EQ(f[0].type, MetricType::kCounter);
  ASSERT_EQ(f[0].metrics.size(), 1u);
  EXPECT_EQ(f[0].metrics[0].value, 3.0);
  EXPECT_TRUE(f[0].metrics[0].label_values.empty());

  EXPECT_THAT(f[1].label_names, ElementsAre("peer", "dir"));
  ASSERT_EQ(f[1].metrics.size(), 2u);
  EXPECT_THAT(f[1].metrics[0].label_values, ElementsAre("a:1", "in"));
  EXPECT_EQ(f[1].metrics[0].value, 5.0);
  EXPECT_THAT(f[1].metrics[1].label_values, ElementsAre("b:1", "in"));
  EXPECT_EQ(f[1].metrics[1].value, 11.0);

  EXPECT_EQ(f[2].type, MetricType::kGauge);
  EXPECT_EQ(f[2].metrics[0].value, 42.0);

  EXPECT_EQ(f[3].type, MetricType::kCounter);
  EXPECT_EQ(f[3].metrics[0].value, 9.0);

  EXPECT_EQ(f[4].type, MetricType::kHistogram);
  EXPECT_THAT(f[4].metrics[0].histogram.cumulative, ElementsAre(0u, 1u, 1u));
}

TEST(MetricsRegistryTest, SameLabelsGiveTheSameChild) {
  MetricsRegistry r;
  auto f = r.AddGaugeFamily<1>("g", "h", {"k"});
  ASSERT_TRUE(f.ok());
  Gauge& a = (*f)->WithLabels({"x"});
  Gauge& b = (*f)->WithLabels({"x"});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &(*f)->WithLabels({"y"}));
}

TEST(MetricsRegistryTest, RejectsBadNamesDuplicatesAndBounds) {
  MetricsRegistry r;
  ASSERT_TRUE(r.AddCounter("ok:name_1_total", "h").ok());
  EXPECT_EQ(r.AddCounter("ok:name_1_total", "h").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(r.AddCallbackGauge("ok:name_1_total", "h", [] { return 0.0; }).code(),
            absl::StatusCode::kAlreadyExists);

  const absl::Status digit = r.AddGauge("1abc", "h").status();
  EXPECT_EQ(digit.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(digit.message(), HasSubstr("'1abc'"));
  EXPECT_EQ(r.AddGauge("", "h").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddGauge("a-b", "h").status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(r.AddCounterFamily<1>("c1_total", "h", {"a:b"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddCounterFamily<1>("c2_total", "h", {"__x"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddCounterFamily<2>("c3_total", "h", {"x", "x"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status le = r.AddHistogramFamily<1>("h1", "h", {"le"}, {1}).status();
  EXPECT_EQ(le.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(le.message(), HasSubstr("'le'"));
  // A counter may use "le" (only histograms reserve it).
  EXPECT_TRUE(r.AddCounterFamily<1>("c4_total", "h", {"le"}).ok());

  const absl::Status order = r.AddHistogram("h2", "h", {1, 1}).status();
  EXPECT_EQ(order.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(order.message(), HasSubstr("strictly increasing at index 1"));
  EXPECT_EQ(r.AddHistogram("h3", "h", {1, std::numeric_limits<double>::infinity()}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddHistogram("h4", "h", {std::nan("")}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Failed registrations leave nothing behind.
  EXPECT_EQ(r.Collect().size(), 2u);
}

TEST(MetricsRegistryTest, ConcurrentUpdatesAndScrapesLoseNothing) {
  MetricsRegistry r;
  Counter* c = *r.AddCounter("c_total", "h");
  Histogram* h = *r.AddHistogram("h_seconds", "h", {0.5});
  Family<Counter, 1>* fam = *r.AddCounterFamily<1>("f_total", "h", {"t"});
  constexpr int kThreads = 8;
  constexpr int kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        c->Increment();
        h->Observe(i % 2 == 0 ? 0.25 : 1.0);
        fam->WithLabels({t % 2 == 0 ? "even" : "odd"}).Increment();
      }
    });
  }
  // Scrapes while the writers run: each histogram snapshot is internally consistent.
  std::thread scraper([&] {
    for (int i = 0; i < 200; ++i) {
      for (const FamilySnapshot& f : r.Collect()) {
        if (f.type != MetricType::kHistogram) continue;
        const HistogramSnapshot& s = f.metrics[0].histogram;
        EXPECT_EQ(s.cumulative.back(), s.count);
        EXPECT_DOUBLE_EQ(s.sum, 0.25 * s.cumulative[0] + 1.0 * (s.count - s.cumulative[0]));
      }
    }
  });
  for (auto& t : threads) t.join();
  scraper.join();
  EXPECT_EQ(c->value(), kThreads * kEach);
  const HistogramSnapshot s = h->Snapshot();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(s.cumulative[0], static_cast<uint64_t>(kThreads * kEach / 2));
  EXPECT_EQ(fam->WithLabels({"even"}).value(), kThreads / 2 * kEach);
  EXPECT_EQ(fam->WithLabels({"odd"}).value(), kThreads / 2 * kEach);
}

TEST(ExponentialBucketsTest, Multiplies) {
  EXPECT_THAT(ExponentialBuckets(0.001, 2, 4), ElementsAre(0.001, 0.002, 0.004, 0.008));
}

}  // namespace
}  // namespace tandem
