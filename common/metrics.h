// Process metrics for Prometheus: counters, gauges (set or read through a callback at scrape
// time) and fixed-bucket histograms, each optionally split by a fixed set of labels, held by a
// MetricsRegistry. common/prometheus_text.h renders a registry in the text exposition format.
// Pure: no I/O, std + abseil only.
//
// Why Tandem has its own: Debian 12 packages no Prometheus client library for C++ (no
// prometheus-cpp, and PyPI has none either), and Tandem installs dependencies from Debian only.
// What a server needs is small: this file and prometheus_text.cc, checked against Debian's
// `promtool check metrics` and a real Prometheus server in the tests.
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
// Thread-safety: every method is thread-safe. Counter and Gauge updates are lock-free atomics;
// Histogram::Observe takes the histogram's own mutex, so a scrape sees its buckets, sum and count
// from the same set of observations. Pointers handed out by the registry and by families stay
// valid for the registry's lifetime. Gauge callbacks run on the scraping thread without any
// registry lock held; they must be thread-safe and must outlive the registry or every scrape.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tandem {

enum class MetricType { kCounter, kGauge, kHistogram };

// A value that only goes up (requests, tokens, bytes, seconds spent). Starts at 0.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Negative or NaN deltas are ignored: a counter never goes down.
  void Increment(double delta = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (requests running, blocks free). Starts at 0.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted in fixed buckets: bucket i counts values <= bounds[i]; an implicit last
// bucket (+Inf) counts everything.
struct HistogramSnapshot {
  std::vector<double> bounds;        // upper bounds, strictly increasing, finite
  std::vector<uint64_t> cumulative;  // [bounds.size() + 1]: observations <= bound, last = count
  double sum = 0.0;
  uint64_t count = 0;
};

class Histogram {
 public:
  // REQUIRES: bounds strictly increasing and finite (MetricsRegistry checks this).
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN observations are ignored.
  void Observe(double value);
  HistogramSnapshot Snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative; last = +Inf
  double sum_ ABSL_GUARDED_BY(mu_) = 0.0;
};

// One metric's value at scrape time, for the renderer.
struct MetricSnapshot {
  std::vector<std::string> label_values;  // same order as FamilySnapshot::label_names
  double value = 0.0;                     // counter, gauge
  HistogramSnapshot histogram;            // histogram
};

struct FamilySnapshot {
  std::string name;
  std::string help;
  MetricType type = MetricType::kCounter;
  std::vector<std::string> label_names;
  std::vector<MetricSnapshot> metrics;  // sorted by label values
};

// What the registry holds: something that can report its family at scrape time.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  virtual FamilySnapshot Collect() const = 0;
};

namespace metrics_internal {
MetricSnapshot Snap(const Counter& c);
MetricSnapshot Snap(const Gauge& g);
MetricSnapshot Snap(const Histogram& h);
template <typename T>
constexpr MetricType TypeOf();
template <>
constexpr MetricType TypeOf<Counter>() {
  return MetricType::kCounter;
}
template <>
constexpr MetricType TypeOf<Gauge>() {
  return MetricType::kGauge;
}
template <>
constexpr MetricType TypeOf<Histogram>() {
  return MetricType::kHistogram;
}
}  // namespace metrics_internal

// Metrics of one name split by N labels; a child is created on first use of its label values.
template <typename T, size_t N>
class Family final : public FamilyBase {
 public:
  using Labels = std::array<std::string, N>;

  Family(std::string name, std::string help, Labels label_names, std::function<T*()> make)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        make_(std::move(make)) {}

  // The metric for these label values (any strings; the renderer escapes them).
  T& WithLabels(const Labels& values) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<T>& child = children_[values];
    if (child == nullptr) child.reset(make_());
    return *child;
  }

  FamilySnapshot Collect() const override {
    FamilySnapshot f;
    f.name = name_;
    f.help = help_;
    f.type = metrics_internal::TypeOf<T>();
    f.label_names.assign(label_names_.begin(), label_names_.end());
    absl::MutexLock lock(&mu_);
    for (const auto& [values, child] : children_) {
      MetricSnapshot m = metrics_internal::Snap(*child);
      m.label_values.assign(values.begin(), values.end());
      f.metrics.push_back(std::move(m));
    }
    return f;
  }

 private:
  const std::string name_;
  const std::string help_;
  const Labels label_names_;
  const std::function<T*()> make_;
  mutable absl::Mutex mu_;
  std::map<Labels, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Unlabelled metrics: present (at 0) in every scrape from registration on.
  // INVALID_ARGUMENT for a name outside [a-zA-Z_:][a-zA-Z0-9_:]*, ALREADY_EXISTS for a name
  // registered before.
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
  // not repeat, and a histogram may not use "le".
  template <size_t N>
  absl::StatusOr<Family<Counter, N>*> AddCounterFamily(const std::string& name,
                                                       const std::string& help,
                                                       std::array<std::string, N> label_names) {
    return AddFamily<Counter, N>(name, help, std::move(label_names), {},
                                 [] { return new Counter(); });
  }
  template <size_t N>
  absl::StatusOr<Family<Gauge, N>*> AddGaugeFamily(const std::string& name, const std::string& help,
                                                   std::array<std::string, N> label_names) {
    return AddFamily<Gauge, N>(name, help, std::move(label_names), {}, [] { return new Gauge(); });
  }
  template <size_t N>
  absl::StatusOr<Family<Histogram, N>*> AddHistogramFamily(const std::string& name,
                                                           const std::string& help,
                                                           std::array<std::string, N> label_names,
                                                           std::vector<double> bounds) {
    return AddFamily<Histogram, N>(name, help, std::move(label_names), bounds,
                                   [bounds] { return new Histogram(bounds); });
  }

  // Every family in registration order, each read now.
  std::vector<FamilySnapshot> Collect() const;

 private:
  template <typename T, size_t N>
  absl::StatusOr<Family<T, N>*> AddFamily(const std::string& name, const std::string& help,
                                          std::array<std::string, N> label_names,
                                          const std::vector<double>& bounds,
                                          std::function<T*()> make) {
    const std::vector<std::string> labels(label_names.begin(), label_names.end());
    if (absl::Status s = Validate(name, labels, metrics_internal::TypeOf<T>(), bounds); !s.ok()) {
      return s;
    }
    auto family =
        std::make_unique<Family<T, N>>(name, help, std::move(label_names), std::move(make));
    Family<T, N>* raw = family.get();
    if (absl::Status s = Insert(name, std::move(family)); !s.ok()) return s;
    return raw;
  }

  static absl::Status Validate(const std::string& name, const std::vector<std::string>& labels,
                               MetricType type, const std::vector<double>& bounds);
  absl::Status Insert(const std::string& name, std::unique_ptr<FamilyBase> family);

  mutable absl::Mutex mu_;
  std::vector<std::pair<std::string, std::unique_ptr<FamilyBase>>> families_ ABSL_GUARDED_BY(mu_);
};

// Bucket bounds `start`, `start * factor`, ... (`count` of them). REQUIRES start > 0,
// factor > 1, count >= 1.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace tandem
