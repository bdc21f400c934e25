#include "bench/serve/report_json.h"

namespace tandem::bench {
namespace {

nlohmann::json SummaryJson(const Summary& s) {
  return {{"count", s.count}, {"mean_ms", s.mean}, {"p50_ms", s.p50},
          {"p90_ms", s.p90},  {"p99_ms", s.p99},   {"max_ms", s.max}};
}

}  // namespace

nlohmann::json ReportToJson(const BenchReport& r, const Slo& slo, nlohmann::json settings) {
  nlohmann::json failures = nlohmann::json::object();
  for (const auto& [code, n] : r.failures) failures[code] = n;
  nlohmann::json rep = {
      {"requests_sent", r.sent},
      {"requests_ok", r.ok},
      {"requests_failed", r.failed},
      {"failures_by_error", failures},
      {"duration_s", r.duration_s},
      {"prompt_tokens", r.prompt_tokens},
      {"output_tokens", r.output_tokens},
      {"server_output_tokens", r.server_output_tokens},
      {"request_throughput_rps", r.request_rps},
      {"output_tokens_per_s", r.output_tokens_per_s},
      {"total_tokens_per_s", r.total_tokens_per_s},
      {"ttft", SummaryJson(r.ttft)},
      {"tpot", SummaryJson(r.tpot)},
      {"itl", SummaryJson(r.itl)},
      {"e2e", SummaryJson(r.e2e)},
      {"good_requests", r.good},
      {"goodput_rps", r.goodput_rps},
      {"good_fraction", r.good_fraction},
      {"slo_ttft_ms", slo.ttft_ms ? nlohmann::json(*slo.ttft_ms) : nlohmann::json(nullptr)},
      {"slo_tpot_ms", slo.tpot_ms ? nlohmann::json(*slo.tpot_ms) : nlohmann::json(nullptr)},
  };
  return {{"settings", std::move(settings)}, {"report", std::move(rep)}};
}

}  // namespace tandem::bench
