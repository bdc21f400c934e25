// The router's Prometheus metrics (docs/operations.md lists them): request latencies as the
// client sees them (time to first token, inter-token latency, end to end), finished requests by
// finish reason or error code, recovered node failures (prefill retries, decode resumes), the
// requests in flight and the prompt tokens routed to prefill nodes with the part KV-aware routing
// expected them to hold, and every answer of the HTTP API by endpoint and status. Names follow
// vLLM's where one exists, with the tandem_ prefix.
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
  Counter* decode_resumes = nullptr;      // failed decode streams resumed (prefill again + decode)
  Counter* pipelined_requests = nullptr;  // Decode calls sent with an early handle (pipelined)
  Gauge* requests_running = nullptr;      // Generate requests in flight
  // Prompt tokens sent to prefill nodes (every attempt), and of those the leading tokens the
  // chosen node's prefix-cache digest said it held: their ratio is the hit rate routing expected.
  Counter* prefill_prompt_tokens = nullptr;
  Counter* prefill_expected_cached_tokens = nullptr;
  // Every HTTP API response, {endpoint, status}: the route's path or "other" (no route), and the
  // HTTP status code ("200", "401", "413", ...; "other" outside 100-599). Bounded: the router has
  // five routes and answers with a fixed set of codes.
  Family<Counter, 2>* http_requests = nullptr;

  // Registers every metric above. ALREADY_EXISTS if the registry already has one of them.
  static absl::StatusOr<RouterMetrics> Register(MetricsRegistry& registry);

  // Records a request that ended with `code` != OK ("CANCELLED", "UNAVAILABLE", ...).
  void RecordFailure(const std::string& code) const;
  // Records an HTTP response: `route` as HttpServerOptions::on_response gives it ("" = no route).
  void RecordHttpResponse(const std::string& route, int status) const;
};

}  // namespace tandem
