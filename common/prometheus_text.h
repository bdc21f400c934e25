// Renders a MetricsRegistry in the Prometheus text exposition format, version 0.0.4 (what a
// Prometheus server scrapes from GET /metrics), with prometheus-cpp's TextSerializer: per family
// "# HELP" and "# TYPE" lines, then one sample per line; histograms as cumulative
// `_bucket{le="..."}` samples ending in le="+Inf", then `_sum` and `_count`.
//
// No I/O. Thread-safe: reads the registry through MetricsRegistry::Collect.
#pragma once

#include <string>

#include "common/metrics.h"

namespace tandem {

// The Content-Type of a response carrying RenderPrometheusText's output.
inline constexpr char kPrometheusTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string RenderPrometheusText(const MetricsRegistry& registry);

}  // namespace tandem
