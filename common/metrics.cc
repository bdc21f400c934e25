#include "common/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

bool IsNameChar(char c, bool first, bool colon_ok) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon_ok && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool ValidName(const std::string& name, bool colon_ok) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, colon_ok)) return false;
  }
  return true;
}

// A gauge or counter whose value is read at scrape time.
class CallbackMetric final : public FamilyBase {
 public:
  CallbackMetric(std::string name, std::string help, MetricType type, std::function<double()> read)
      : name_(std::move(name)), help_(std::move(help)), type_(type), read_(std::move(read)) {}

  FamilySnapshot Collect() const override {
    FamilySnapshot f;
    f.name = name_;
    f.help = help_;
    f.type = type_;
    MetricSnapshot m;
    m.value = read_();
    f.metrics.push_back(std::move(m));
    return f;
  }

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::function<double()> read_;
};

}  // namespace

void Counter::Increment(double delta) {
  if (!(delta >= 0.0)) return;  // also false for NaN
  value_.fetch_add(delta, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // First bound >= value: buckets are "less than or equal" (Prometheus' `le`).
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += value;
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i];
    s.cumulative[i] = running;
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

namespace metrics_internal {

MetricSnapshot Snap(const Counter& c) {
  MetricSnapshot m;
  m.value = c.value();
  return m;
}

MetricSnapshot Snap(const Gauge& g) {
  MetricSnapshot m;
  m.value = g.value();
  return m;
}

MetricSnapshot Snap(const Histogram& h) {
  MetricSnapshot m;
  m.histogram = h.Snapshot();
  return m;
}

}  // namespace metrics_internal

absl::Status MetricsRegistry::Validate(const std::string& name,
                                       const std::vector<std::string>& labels, MetricType type,
                                       const std::vector<double>& bounds) {
  if (!ValidName(name, /*colon_ok=*/true)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", name, "' is not [a-zA-Z_:][a-zA-Z0-9_:]*"));
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& label : labels) {
    if (!ValidName(label, /*colon_ok=*/false)) {
      return absl::InvalidArgumentError(absl::StrCat("label name '", label, "' of metric ", name,
                                                     " is not [a-zA-Z_][a-zA-Z0-9_]*"));
    }
    if (label.rfind("__", 0) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("label name '", label, "' of metric ", name,
                                                     " starts with '__' (reserved)"));
    }
    if (type == MetricType::kHistogram && label == "le") {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram ", name, " may not use the label 'le' (it names the bucket bounds)"));
    }
    if (!seen.insert(label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("label name '", label, "' repeats in metric ", name));
    }
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return absl::InvalidArgumentError(absl::StrCat("histogram ", name, " bucket bound ", i,
                                                     " is not finite (+Inf is implicit)"));
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("histogram ", name, " bucket bounds are not ",
                                                     "strictly increasing at index ", i, " (",
                                                     bounds[i - 1], " then ", bounds[i], ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status MetricsRegistry::Insert(const std::string& name, std::unique_ptr<FamilyBase> family) {
  absl::MutexLock lock(&mu_);
  for (const auto& [existing, unused] : families_) {
    if (existing == name) {
      return absl::AlreadyExistsError(absl::StrCat("metric ", name, " is already registered"));
    }
  }
  families_.emplace_back(name, std::move(family));
  return absl::OkStatus();
}

absl::StatusOr<Counter*> MetricsRegistry::AddCounter(const std::string& name,
                                                     const std::string& help) {
  absl::StatusOr<Family<Counter, 0>*> f = AddCounterFamily<0>(name, help, {});
  if (!f.ok()) return f.status();
  return &(*f)->WithLabels({});
}

absl::StatusOr<Gauge*> MetricsRegistry::AddGauge(const std::string& name, const std::string& help) {
  absl::StatusOr<Family<Gauge, 0>*> f = AddGaugeFamily<0>(name, help, {});
  if (!f.ok()) return f.status();
  return &(*f)->WithLabels({});
}

absl::Status MetricsRegistry::AddCallbackGauge(const std::string& name, const std::string& help,
                                               std::function<double()> read) {
  if (absl::Status s = Validate(name, {}, MetricType::kGauge, {}); !s.ok()) return s;
  return Insert(name,
                std::make_unique<CallbackMetric>(name, help, MetricType::kGauge, std::move(read)));
}

absl::Status MetricsRegistry::AddCallbackCounter(const std::string& name, const std::string& help,
                                                 std::function<double()> read) {
  if (absl::Status s = Validate(name, {}, MetricType::kCounter, {}); !s.ok()) return s;
  return Insert(
      name, std::make_unique<CallbackMetric>(name, help, MetricType::kCounter, std::move(read)));
}

absl::StatusOr<Histogram*> MetricsRegistry::AddHistogram(const std::string& name,
                                                         const std::string& help,
                                                         std::vector<double> bounds) {
  absl::StatusOr<Family<Histogram, 0>*> f =
      AddHistogramFamily<0>(name, help, {}, std::move(bounds));
  if (!f.ok()) return f.status();
  return &(*f)->WithLabels({});
}

std::vector<FamilySnapshot> MetricsRegistry::Collect() const {
  // Families are never removed, so their pointers outlive the lock; collecting outside it keeps
  // a slow gauge callback from blocking registration.
  std::vector<const FamilyBase*> families;
  {
    absl::MutexLock lock(&mu_);
    families.reserve(families_.size());
    for (const auto& [name, family] : families_) families.push_back(family.get());
  }
  std::vector<FamilySnapshot> out;
  out.reserve(families.size());
  for (const FamilyBase* f : families) out.push_back(f->Collect());
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  bounds.reserve(count);
  double b = start;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(b);
    b *= factor;
  }
  return bounds;
}

}  // namespace tandem
