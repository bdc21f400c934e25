// Turns the records of one run into the figures a serving benchmark reports: requests ok/failed
// (by error class), throughput, TTFT/TPOT/ITL/end-to-end percentiles and goodput at an SLO.
// Pure; all functions are thread-compatible.
//
// Definitions (those of vLLM's benchmark_serving, so figures compare):
//   TTFT   sent → first token chunk.
//   TPOT   per request, (e2e − TTFT) / (output_tokens − 1); requests with one token have none.
//   ITL    every gap between consecutive token chunks of a request (all requests pooled).
//   e2e    sent → end of stream.
//   goodput  ok requests with TTFT ≤ slo_ttft and TPOT ≤ slo_tpot (an unset SLO always holds),
//            per second of run time; `good_fraction` is the same count ÷ requests sent.
// Percentiles interpolate linearly between order statistics (numpy's default).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/serve/request_record.h"

namespace tandem::bench {

struct Summary {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds
};

// p in [0, 100]; `sorted` ascending and non-empty.
double Percentile(const std::vector<double>& sorted, double p);
Summary Summarize(std::vector<double> values_ms);

struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
};

struct BenchReport {
  int64_t sent = 0, ok = 0, failed = 0;
  std::map<std::string, int64_t> failures;  // error class → count
  double duration_s = 0;                    // first send → last completion
  int64_t prompt_tokens = 0;                // ok requests
  int64_t output_tokens = 0;                // ok requests, as counted
  int64_t server_output_tokens = 0;         // ok requests, as the server reported (-1: not all)
  double request_rps = 0, output_tokens_per_s = 0, total_tokens_per_s = 0;
  Summary ttft, tpot, itl, e2e;
  int64_t good = 0;
  double goodput_rps = 0, good_fraction = 0;
};

// `duration` is the measured run time (the divisor of every rate).
BenchReport ComputeReport(const std::vector<RequestRecord>& records, absl::Duration duration,
                          const Slo& slo);

// Per-request TPOT in ms; nullopt with fewer than two tokens.
std::optional<double> TpotMs(const RequestRecord& r);

// "RESULT <prefix>name=value" lines for the headline figures, one per line.
std::string ResultLines(const BenchReport& report, const std::string& prefix);
// A human-readable table of the report.
std::string FormatReport(const BenchReport& report);

}  // namespace tandem::bench
