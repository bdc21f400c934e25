// MetricsRegistry and the metric types on prometheus-cpp: values, histogram buckets, label
// families, validation of names and bounds, and concurrent updates.
#include "common/metrics.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Cumulative bucket counts of a histogram read through prometheus-cpp, +Inf last.
std::vector<uint64_t> Cumulative(const prometheus::ClientMetric::Histogram& h) {
  std::vector<uint64_t> out;
  for (const prometheus::ClientMetric::Bucket& b : h.bucket) out.push_back(b.cumulative_count);
  return out;
}

TEST(CounterTest, OnlyGoesUp) {
  MetricsRegistry r;
  Counter& c = **r.AddCounter("c_total", "h");
  EXPECT_EQ(c.value(), 0.0);
  c.Increment();
  c.Increment(2.5);
  c.Increment(-4);
  c.Increment(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(c.value(), 3.5);
}

TEST(GaugeTest, SetAndAdd) {
  MetricsRegistry r;
  Gauge& g = **r.AddGauge("g", "h");
  g.Set(7);
  g.Add(-2);
  g.Add(0.5);
  EXPECT_EQ(g.value(), 5.5);
}

TEST(HistogramTest, BucketsAreLessOrEqualAndCumulative) {
  MetricsRegistry r;
  Histogram& h = **r.AddHistogram("h_seconds", "h", {0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.2, 1.0, 5.0, 50.0, 50.0}) h.Observe(v);
  h.Observe(std::numeric_limits<double>::quiet_NaN());
  const prometheus::ClientMetric::Histogram s = h.Snapshot();
  ASSERT_EQ(s.bucket.size(), 4u);
  EXPECT_EQ(s.bucket[0].upper_bound, 0.1);
  EXPECT_EQ(s.bucket[2].upper_bound, 10);
  EXPECT_TRUE(std::isinf(s.bucket[3].upper_bound));
  // <=0.1: 0.05, 0.1; <=1: + 0.2, 1.0; <=10: + 5.0; +Inf: + 50, 50.
  EXPECT_THAT(Cumulative(s), ElementsAre(2u, 4u, 5u, 7u));
  EXPECT_EQ(s.sample_count, 7u);
  EXPECT_DOUBLE_EQ(s.sample_sum, 0.05 + 0.1 + 0.2 + 1.0 + 5.0 + 50.0 + 50.0);
}

TEST(HistogramTest, NoBoundsMeansOnlyInf) {
  MetricsRegistry r;
  Histogram& h = **r.AddHistogram("h_seconds", "h", {});
  h.Observe(-3);
  h.Observe(3);
  const prometheus::ClientMetric::Histogram s = h.Snapshot();
  EXPECT_THAT(Cumulative(s), ElementsAre(2u));
  EXPECT_EQ(s.sample_sum, 0.0);
}

// The value of the child of `f` whose label `name` is `value`.
const prometheus::ClientMetric* Child(const prometheus::MetricFamily& f, const std::string& name,
                                      const std::string& value) {
  for (const prometheus::ClientMetric& m : f.metric) {
    for (const prometheus::ClientMetric::Label& l : m.label) {
      if (l.name == name && l.value == value) return &m;
    }
  }
  return nullptr;
}

TEST(MetricsRegistryTest, CollectsInRegistrationOrder) {
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

  const std::vector<prometheus::MetricFamily> f = r.Collect();
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].name, "t_tokens_total");
  EXPECT_EQ(f[0].type, prometheus::MetricType::Counter);
  ASSERT_EQ(f[0].metric.size(), 1u);
  EXPECT_EQ(f[0].metric[0].counter.value, 3.0);
  EXPECT_TRUE(f[0].metric[0].label.empty());

  EXPECT_EQ(f[1].name, "t_bytes_total");
  ASSERT_EQ(f[1].metric.size(), 2u);
  const prometheus::ClientMetric* a = Child(f[1], "peer", "a:1");
  const prometheus::ClientMetric* b = Child(f[1], "peer", "b:1");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->counter.value, 5.0);
  EXPECT_EQ(b->counter.value, 11.0);
  EXPECT_NE(Child(f[1], "dir", "in"), nullptr);

  EXPECT_EQ(f[2].type, prometheus::MetricType::Gauge);
  EXPECT_EQ(f[2].metric[0].gauge.value, 42.0);

  EXPECT_EQ(f[3].type, prometheus::MetricType::Counter);
  EXPECT_EQ(f[3].metric[0].counter.value, 9.0);

  EXPECT_EQ(f[4].type, prometheus::MetricType::Histogram);
  EXPECT_THAT(Cumulative(f[4].metric[0].histogram), ElementsAre(0u, 1u, 1u));
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

  EXPECT_EQ(r.AddGauge("g1", "two\nlines").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddCallbackGauge("g2", "back\\slash", [] { return 0.0; }).code(),
            absl::StatusCode::kInvalidArgument);

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
  // Failed registrations leave nothing behind (c4_total has no child yet, so it is not listed).
  EXPECT_EQ(r.Collect().size(), 1u);
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
      for (const prometheus::MetricFamily& f : r.Collect()) {
        if (f.type != prometheus::MetricType::Histogram) continue;
        const prometheus::ClientMetric::Histogram& s = f.metric[0].histogram;
        const uint64_t low = s.bucket[0].cumulative_count;
        EXPECT_EQ(s.bucket.back().cumulative_count, s.sample_count);
        EXPECT_DOUBLE_EQ(s.sample_sum, 0.25 * low + 1.0 * (s.sample_count - low));
      }
    }
  });
  for (auto& t : threads) t.join();
  scraper.join();
  EXPECT_EQ(c->value(), kThreads * kEach);
  const prometheus::ClientMetric::Histogram s = h->Snapshot();
  EXPECT_EQ(s.sample_count, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(s.bucket[0].cumulative_count, static_cast<uint64_t>(kThreads * kEach / 2));
  EXPECT_EQ(fam->WithLabels({"even"}).value(), kThreads / 2 * kEach);
  EXPECT_EQ(fam->WithLabels({"odd"}).value(), kThreads / 2 * kEach);
}

TEST(ExponentialBucketsTest, Multiplies) {
  EXPECT_THAT(ExponentialBuckets(0.001, 2, 4), ElementsAre(0.001, 0.002, 0.004, 0.008));
}

}  // namespace
}  // namespace tandem
