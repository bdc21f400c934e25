// Renders a MetricsRegistry in the Prometheus text exposition format, version 0.0.4 (what a
// Prometheus server scrapes from GET /metrics): per family "# HELP" and "# TYPE" lines, then one
// sample per line; histograms as cumulative `_bucket{le="..."}` samples ending in le="+Inf",
// then `_sum` and `_count`. Label values escape \ " and newline; help text escapes \ and newline.
// Numbers are written in the shortest form that reads back to the same double; +Inf, -Inf, NaN
// as Prometheus spells them.
//
// Pure (no I/O). Thread-safe: reads the registry through MetricsRegistry::Collect.
#pragma once

#include <string>

#include "common/metrics.h"

namespace tandem {

// The Content-Type of a response carrying RenderPrometheusText's output.
inline constexpr char kPrometheusTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string RenderPrometheusText(const MetricsRegistry& registry);

// Exposed for tests.
std::string FormatPrometheusNumber(double value);
std::string EscapeLabelValue(const std::string& value);
std::string EscapeHelp(const std::string& help);

}  // namespace tandem
