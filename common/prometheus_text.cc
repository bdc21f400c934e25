#include "common/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"}` from the family's label names and one metric's values, plus an optional
// extra label (le for histogram buckets); empty when there are no labels at all.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "" : ",", names[i], "=\"", EscapeLabelValue(values[i]),
                    "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", extra_name, "=\"", extra_value, "\"");
  }
  return out.empty() ? out : absl::StrCat("{", out, "}");
}

}  // namespace

std::string FormatPrometheusNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, r.ptr);
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderPrometheusText(const MetricsRegistry& registry) {
  std::string out;
  for (const FamilySnapshot& f : registry.Collect()) {
    absl::StrAppend(&out, "# HELP ", f.name, " ", EscapeHelp(f.help), "\n");
    absl::StrAppend(&out, "# TYPE ", f.name, " ", TypeName(f.type), "\n");
    for (const MetricSnapshot& m : f.metrics) {
      if (f.type != MetricType::kHistogram) {
        absl::StrAppend(&out, f.name, LabelSet(f.label_names, m.label_values), " ",
                        FormatPrometheusNumber(m.value), "\n");
        continue;
      }
      const HistogramSnapshot& h = m.histogram;
      for (size_t i = 0; i < h.cumulative.size(); ++i) {
        const std::string le =
            i < h.bounds.size() ? FormatPrometheusNumber(h.bounds[i]) : std::string("+Inf");
        absl::StrAppend(&out, f.name, "_bucket", LabelSet(f.label_names, m.label_values, "le", le),
                        " ", h.cumulative[i], "\n");
      }
      const std::string labels = LabelSet(f.label_names, m.label_values);
      absl::StrAppend(&out, f.name, "_sum", labels, " ", FormatPrometheusNumber(h.sum), "\n");
      absl::StrAppend(&out, f.name, "_count", labels, " ", h.count, "\n");
    }
  }
  return out;
}

}  // namespace tandem
