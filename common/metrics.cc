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
class CallbackMetric final : public prometheus::Collectable {
 public:
  CallbackMetric(std::string name, std::string help, prometheus::MetricType type,
                 std::function<double()> read)
      : name_(std::move(name)), help_(std::move(help)), type_(type), read_(std::move(read)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::ClientMetric m;
    const double value = read_();
    if (type_ == prometheus::MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    return {prometheus::MetricFamily{name_, help_, type_, {std::move(m)}}};
  }

 private:
  const std::string name_;
  const std::string help_;
  const prometheus::MetricType type_;
  const std::function<double()> read_;
};

}  // namespace

absl::Status MetricsRegistry::Validate(const std::string& name, const std::string& help,
                                       const std::vector<std::string>& labels, bool histogram,
                                       const std::vector<double>& bounds) {
  if (!ValidName(name, /*colon_ok=*/true)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", name, "' is not [a-zA-Z_:][a-zA-Z0-9_:]*"));
  }
  if (help.find_first_of("\\\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "help text of metric ", name, " has a newline or a backslash (written unescaped)"));
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
    if (histogram && label == "le") {
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

absl::Status MetricsRegistry::Insert(Entry entry) {
  absl::MutexLock lock(&mu_);
  for (const Entry& existing : entries_) {
    if (existing.name == entry.name) {
      return absl::AlreadyExistsError(
          absl::StrCat("metric ", entry.name, " is already registered"));
    }
  }
  entries_.push_back(std::move(entry));
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
  if (absl::Status s = Validate(name, help, {}, /*histogram=*/false, {}); !s.ok()) return s;
  return Insert(Entry{
      name,
      std::make_unique<CallbackMetric>(name, help, prometheus::MetricType::Gauge, std::move(read)),
      nullptr});
}

absl::Status MetricsRegistry::AddCallbackCounter(const std::string& name, const std::string& help,
                                                 std::function<double()> read) {
  if (absl::Status s = Validate(name, help, {}, /*histogram=*/false, {}); !s.ok()) return s;
  return Insert(Entry{name,
                      std::make_unique<CallbackMetric>(name, help, prometheus::MetricType::Counter,
                                                       std::move(read)),
                      nullptr});
}

absl::StatusOr<Histogram*> MetricsRegistry::AddHistogram(const std::string& name,
                                                         const std::string& help,
                                                         std::vector<double> bounds) {
  absl::StatusOr<Family<Histogram, 0>*> f =
      AddHistogramFamily<0>(name, help, {}, std::move(bounds));
  if (!f.ok()) return f.status();
  return &(*f)->WithLabels({});
}

std::vector<prometheus::MetricFamily> MetricsRegistry::Collect() const {
  // Entries are never removed, so their pointers outlive the lock; collecting outside it keeps
  // a slow gauge callback from blocking registration.
  std::vector<const prometheus::Collectable*> sources;
  {
    absl::MutexLock lock(&mu_);
    sources.reserve(entries_.size());
    for (const Entry& e : entries_) sources.push_back(e.values.get());
  }
  std::vector<prometheus::MetricFamily> out;
  out.reserve(sources.size());
  for (const prometheus::Collectable* source : sources) {
    for (prometheus::MetricFamily& f : source->Collect()) out.push_back(std::move(f));
  }
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
