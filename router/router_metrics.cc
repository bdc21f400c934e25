#include "router/router_metrics.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {

absl::StatusOr<RouterMetrics> RouterMetrics::Register(MetricsRegistry& r) {
  RouterMetrics m;
  // vLLM's bucket bounds for the same three histograms, so dashboards carry over.
  TANDEM_ASSIGN_OR_RETURN(
      m.time_to_first_token,
      r.AddHistogram("tandem_time_to_first_token_seconds",
                     "Time from the request's arrival at the router to its first token sent.",
                     {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}));
  TANDEM_ASSIGN_OR_RETURN(
      m.inter_token_latency,
      r.AddHistogram("tandem_inter_token_latency_seconds",
                     "Time between two consecutive tokens sent for one request.",
                     {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                      7.5, 10.0, 20.0, 40.0, 80.0}));
  TANDEM_ASSIGN_OR_RETURN(
      m.e2e_request_latency,
      r.AddHistogram("tandem_e2e_request_latency_seconds",
                     "Time from the request's arrival to its final response, successful requests.",
                     {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                      30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}));
  TANDEM_ASSIGN_OR_RETURN(
      m.request_success,
      r.AddCounterFamily<1>("tandem_request_success_total",
                            "Requests finished successfully, by finish reason (stop, length).",
                            {"finish_reason"}));
  TANDEM_ASSIGN_OR_RETURN(
      m.request_failure,
      r.AddCounterFamily<1>("tandem_request_failure_total",
                            "Requests that ended with an error, by status code (e.g. CANCELLED, "
                            "INVALID_ARGUMENT, UNAVAILABLE).",
                            {"code"}));
  TANDEM_ASSIGN_OR_RETURN(
      m.prefill_retries,
      r.AddCounter("tandem_prefill_retries_total",
                   "Prefill calls that failed retryably and were retried on another node."));
  TANDEM_ASSIGN_OR_RETURN(
      m.decode_resumes,
      r.AddCounter("tandem_decode_resumes_total",
                   "Decode streams that failed retryably and were resumed (prefill of the prompt "
                   "and the tokens so far, then decode on another node)."));
  TANDEM_ASSIGN_OR_RETURN(
      m.pipelined_requests,
      r.AddCounter("tandem_router_pipelined_requests_total",
                   "Decode calls sent with an early KV handle while the prefill ran "
                   "(--pipelined_transfer), retries included."));
  TANDEM_ASSIGN_OR_RETURN(
      m.requests_running,
      r.AddGauge("tandem_num_requests_running", "Generate requests in flight in the router."));
  TANDEM_ASSIGN_OR_RETURN(
      m.prefill_prompt_tokens,
      r.AddCounter("tandem_router_prefill_prompt_tokens_total",
                   "Prompt tokens sent to prefill nodes, every attempt counted."));
  TANDEM_ASSIGN_OR_RETURN(
      m.prefill_expected_cached_tokens,
      r.AddCounter("tandem_router_prefill_expected_cached_tokens_total",
                   "Of the prompt tokens sent to prefill nodes, the leading tokens the chosen "
                   "node's prefix-cache digest said it held when the router picked it."));
  TANDEM_ASSIGN_OR_RETURN(
      m.http_requests,
      r.AddCounterFamily<2>("tandem_http_requests_total",
                            "HTTP API responses, by endpoint (the route's path, or other) and HTTP "
                            "status code; refusals before a request runs (401, 404, 405, 413) "
                            "included.",
                            {"endpoint", "status"}));
  // Present at 0 from the start, so rate() over them works before the first request ends.
  m.request_success->WithLabels({"stop"});
  m.request_success->WithLabels({"length"});
  return m;
}

void RouterMetrics::RecordFailure(const std::string& code) const {
  request_failure->WithLabels({code}).Increment();
}

void RouterMetrics::RecordHttpResponse(const std::string& route, int status) const {
  http_requests
      ->WithLabels({route.empty() ? "other" : route,
                    status >= 100 && status <= 599 ? absl::StrCat(status) : "other"})
      .Increment();
}

}  // namespace tandem
