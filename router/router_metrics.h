// The router's Prometheus metrics (docs/operations.md lists them): request latencies as the
// client sees them (time to first token, inter-token latency, end to end), finished requests by
// finish reason or error code, recovered node failures (prefill retries, decode resumes), the
// requests in flight and the prompt tokens routed to prefill nodes with the part KV-aware routing
// expected them to hold. Names follow vLLM's where one exists, with the tandem_ prefix.
//
// RouterMetrics only points into a MetricsRegistry that owns the metrics; it is valid as long as
// that registry. All updates are thread-safe (common/metrics.h).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace tandem {

struct RouterMetrics {
  Histogram* time_to_first_token = nullptr;       // seconds, request arrival → first token sent
  Histogram* inter_token_latency = nullptr;       // seconds between two tokens of one request
  Histogram* e2e_request_latency = nullptr;       // seconds, arrival → final response (successes)
  Family<Counter, 1>* request_success = nullptr;  // {finish_reason}: stop | length
  Family<Counter, 1>* request_failure = nullptr;  // {code}: absl status code name
  Counter* prefill_retries = nullptr;             // failed prefill calls retried on another node
  Counter* decode_resumes = nullptr;  // failed decode streams resumed (prefill again + decode)
  Gauge* requests_running = nullptr;  // Generate requests in flight
  // Prompt tokens sent to prefill nodes (every attempt), and of those the leading tokens the
  // chosen node's prefix-cache digest said it held: their ratio is the hit rate routing expected.
  Counter* prefill_prompt_tokens = nullptr;
  Counter* prefill_expected_cached_tokens = nullptr;

  // Registers every metric above. ALREADY_EXISTS if the registry already has one of them.
  static absl::StatusOr<RouterMetrics> Register(MetricsRegistry& registry);

  // Records a request that ended with `code` != OK ("CANCELLED", "UNAVAILABLE", ...).
  void RecordFailure(const std::string& code) const;
};

}  // namespace tandem
