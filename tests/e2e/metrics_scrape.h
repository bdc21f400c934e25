// Reading a process's Prometheus /metrics in e2e tests: the URL a node logs at start-up and the
// samples of the text exposition.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::testing {

// The URL in a process log's "metrics at http://HOST:PORT/metrics" line; NOT_FOUND without one.
absl::StatusOr<std::string> MetricsUrlInLog(const std::string& log);

// GET `url` (bounded by 30 s) and return its samples by series name, labels included verbatim
// (`name{a="b"}`). UNAVAILABLE when the request fails.
absl::StatusOr<std::map<std::string, double>> ScrapeMetrics(const std::string& url);

}  // namespace tandem::testing
