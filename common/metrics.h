// Process metrics for Prometheus: counters, gauges (set or read through a callback at scrape
// time) and fixed-bucket histograms, each optionally split by a fixed set of labels, held by a
// MetricsRegistry. The values live in prometheus-cpp (Debian 12's prometheus-cpp-dev, its `core`
// library: in-memory only, no I/O); common/prometheus_text.h renders a registry with
// prometheus-cpp's text serializer. What this file adds on top is Tandem's contract:
// registration returns absl::Status instead of throwing, label arity is part of the type, and
// counters and histograms ignore values that would corrupt them.
//
// Usage:
//   MetricsRegistry registry;
//   absl::StatusOr<Counter*> tokens = registry.AddCounter("tandem_generation_tokens_total", "...");
//   absl::StatusOr<Family<Counter, 1>*> done =
//       registry.AddCounterFamily<1>("tandem_request_success_total", "...", {"finish_reason"});
//   (*tokens)->Increment(12);
//   (*done)->WithLabels({"stop"}).Increment();
//
// Label arity is part of the type (Family<T, N> takes exactly N values), so a mismatch is a
// compile error. Registration validates names (Prometheus' grammar) and refuses duplicates with
// INVALID_ARGUMENT / ALREADY_EXISTS.
//
// Thread-safety: every method is thread-safe. Counter and Gauge updates are prometheus-cpp's
// lock-free atomics; a histogram takes its own mutex, so a scrape sees its buckets, sum and count
// from the same set of observations. Pointers handed out by the registry and by families stay
// valid for the registry's lifetime. Gauge callbacks run on the scraping thread without any
// registry lock held; they must be thread-safe and must outlive the registry or every scrape.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"

namespace tandem {

// A value that only goes up (requests, tokens, bytes, seconds spent). Starts at 0.
class Counter {
 public:
  using Backend = prometheus::Counter;
  explicit Counter(prometheus::Counter& counter) : counter_(counter) {}
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Negative or NaN deltas are ignored: a counter never goes down.
  void Increment(double delta = 1.0) {
    if (delta >= 0.0) counter_.Increment(delta);  // false for NaN too
  }
  double value() const { return counter_.Value(); }

 private:
  prometheus::Counter& counter_;
};

// A value that goes up and down (requests running, blocks free). Starts at 0.
class Gauge {
 public:
  using Backend = prometheus::Gauge;
  explicit Gauge(prometheus::Gauge& gauge) : gauge_(gauge) {}
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { gauge_.Set(value); }
  void Add(double delta) { gauge_.Increment(delta); }
  double value() const { return gauge_.Value(); }

 private:
  prometheus::Gauge& gauge_;
};

// Observations counted in fixed buckets: bucket i counts values <= bounds[i]; an implicit last
// bucket (+Inf) counts everything.
class Histogram {
 public:
  using Backend = prometheus::Histogram;
  explicit Histogram(prometheus::Histogram& histogram) : histogram_(histogram) {}
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN observations are ignored.
  void Observe(double value) {
    if (!std::isnan(value)) histogram_.Observe(value);
  }
  // Buckets (cumulative, the last one +Inf), sum and count, read together.
  prometheus::ClientMetric::Histogram Snapshot() const { return histogram_.Collect().histogram; }

 private:
  prometheus::Histogram& histogram_;
};

// What the registry keeps of a family besides its prometheus-cpp values.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
};

// Metrics of one name split by N labels; a child is created on first use of its label values.
template <typename T, size_t N>
class Family final : public FamilyBase {
 public:
  using Labels = std::array<std::string, N>;
  using Backend = typename T::Backend;

  // `bounds`: the bucket bounds of each child, histograms only.
  Family(prometheus::Family<Backend>& family, Labels label_names, std::vector<double> bounds)
      : family_(family), label_names_(std::move(label_names)), bounds_(std::move(bounds)) {}

  // The metric for these label values (any strings; the serializer escapes them).
  T& WithLabels(const Labels& values) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<T>& child = children_[values];
    if (child == nullptr) {
      prometheus::Labels labels;
      for (size_t i = 0; i != N; ++i) labels.emplace(label_names_[i], values[i]);
      if constexpr (std::is_same_v<T, Histogram>) {
        child = std::make_unique<T>(family_.Add(labels, bounds_));
      } else {
        child = std::make_unique<T>(family_.Add(labels));
      }
    }
    return *child;
  }

 private:
  prometheus::Family<Backend>& family_;
  const Labels label_names_;
  const std::vector<double> bounds_;
  absl::Mutex mu_;
  std::map<Labels, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

class MetricsRegistry final : public prometheus::Collectable {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Unlabelled metrics: present (at 0) in every scrape from registration on.
  // INVALID_ARGUMENT for a name outside [a-zA-Z_:][a-zA-Z0-9_:]* or help text with a newline or
  // a backslash (prometheus-cpp 1.0.1 writes help unescaped, which would break the format),
  // ALREADY_EXISTS for a name registered before.
  absl::StatusOr<Counter*> AddCounter(const std::string& name, const std::string& help);
  absl::StatusOr<Gauge*> AddGauge(const std::string& name, const std::string& help);
  // A gauge read by calling `read` at each scrape (e.g. blocks free, requests queued).
  absl::Status AddCallbackGauge(const std::string& name, const std::string& help,
                                std::function<double()> read);
  // A counter kept elsewhere (e.g. a component's own cumulative count), read at each scrape.
  // `read` must never decrease.
  absl::Status AddCallbackCounter(const std::string& name, const std::string& help,
                                  std::function<double()> read);
  // INVALID_ARGUMENT also for bounds that are not strictly increasing and finite.
  absl::StatusOr<Histogram*> AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> bounds);

  // Labelled families. Label names follow [a-zA-Z_][a-zA-Z0-9_]*, may not start with "__", may
  // not repeat, and a histogram may not use "le". A family appears in a scrape once it has a
  // child.
  template <size_t N>
  absl::StatusOr<Family<Counter, N>*> AddCounterFamily(const std::string& name,
                                                       const std::string& help,
                                                       std::array<std::string, N> label_names) {
    return AddFamily<Counter, N>(name, help, std::move(label_names), {});
  }
  template <size_t N>
  absl::StatusOr<Family<Gauge, N>*> AddGaugeFamily(const std::string& name, const std::string& help,
                                                   std::array<std::string, N> label_names) {
    return AddFamily<Gauge, N>(name, help, std::move(label_names), {});
  }
  template <size_t N>
  absl::StatusOr<Family<Histogram, N>*> AddHistogramFamily(const std::string& name,
                                                           const std::string& help,
                                                           std::array<std::string, N> label_names,
                                                           std::vector<double> bounds) {
    return AddFamily<Histogram, N>(name, help, std::move(label_names), std::move(bounds));
  }

  // Every family in registration order, each read now (prometheus::Collectable).
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Entry {
    std::string name;
    std::unique_ptr<prometheus::Collectable> values;  // a prometheus::Family or a callback
    std::unique_ptr<FamilyBase> family;               // refers into `values`: destroyed first
  };

  template <typename T, size_t N>
  absl::StatusOr<Family<T, N>*> AddFamily(const std::string& name, const std::string& help,
                                          std::array<std::string, N> label_names,
                                          std::vector<double> bounds) {
    const std::vector<std::string> labels(label_names.begin(), label_names.end());
    if (absl::Status s = Validate(name, help, labels, std::is_same_v<T, Histogram>, bounds);
        !s.ok()) {
      return s;
    }
    auto values =
        std::make_unique<prometheus::Family<typename T::Backend>>(name, help, prometheus::Labels{});
    auto family =
        std::make_unique<Family<T, N>>(*values, std::move(label_names), std::move(bounds));
    Family<T, N>* raw = family.get();
    if (absl::Status s = Insert(Entry{name, std::move(values), std::move(family)}); !s.ok()) {
      return s;
    }
    return raw;
  }

  static absl::Status Validate(const std::string& name, const std::string& help,
                               const std::vector<std::string>& labels, bool histogram,
                               const std::vector<double>& bounds);
  absl::Status Insert(Entry entry);

  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// Bucket bounds `start`, `start * factor`, ... (`count` of them). REQUIRES start > 0,
// factor > 1, count >= 1.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace tandem
