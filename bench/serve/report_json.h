// The run's settings and every figure of its BenchReport as one JSON document (for scripts).
#pragma once

#include <string>

#include "bench/serve/latency_report.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {

// `settings` is whatever the caller wants recorded (flags, backend, target); it is stored as is
// under "settings", the report's figures under "report".
nlohmann::json ReportToJson(const BenchReport& report, const Slo& slo, nlohmann::json settings);

}  // namespace tandem::bench
