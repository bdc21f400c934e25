#include "bench/serve/latency_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::bench {

double Percentile(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary Summarize(std::vector<double> values_ms) {
  Summary s;
  s.count = static_cast<int64_t>(values_ms.size());
  if (values_ms.empty()) return s;
  std::sort(values_ms.begin(), values_ms.end());
  double sum = 0;
  for (double v : values_ms) sum += v;
  s.mean = sum / static_cast<double>(values_ms.size());
  s.p50 = Percentile(values_ms, 50);
  s.p90 = Percentile(values_ms, 90);
  s.p99 = Percentile(values_ms, 99);
  s.max = values_ms.back();
  return s;
}

std::optional<double> TpotMs(const RequestRecord& r) {
  if (r.output_tokens < 2 || r.chunk_times.empty()) return std::nullopt;
  return absl::ToDoubleMilliseconds(r.e2e - r.chunk_times.front()) /
         static_cast<double>(r.output_tokens - 1);
}

BenchReport ComputeReport(const std::vector<RequestRecord>& records, absl::Duration duration,
                          const Slo& slo) {
  BenchReport rep;
  rep.duration_s = absl::ToDoubleSeconds(duration);
  std::vector<double> ttft, tpot, itl, e2e;
  bool all_reported = true;
  for (const RequestRecord& r : records) {
    ++rep.sent;
    if (!r.ok) {
      ++rep.failed;
      ++rep.failures[r.error];
      continue;
    }
    ++rep.ok;
    rep.prompt_tokens += r.prompt_tokens;
    rep.output_tokens += r.output_tokens;
    if (r.server_output_tokens < 0) {
      all_reported = false;
    } else {
      rep.server_output_tokens += r.server_output_tokens;
    }
    e2e.push_back(absl::ToDoubleMilliseconds(r.e2e));
    std::optional<double> ttft_ms;
    if (!r.chunk_times.empty()) {
      ttft_ms = absl::ToDoubleMilliseconds(r.chunk_times.front());
      ttft.push_back(*ttft_ms);
    }
    for (size_t i = 1; i < r.chunk_times.size(); ++i) {
      itl.push_back(absl::ToDoubleMilliseconds(r.chunk_times[i] - r.chunk_times[i - 1]));
    }
    const std::optional<double> tpot_ms = TpotMs(r);
    if (tpot_ms) tpot.push_back(*tpot_ms);
    const bool ttft_met = !slo.ttft_ms || (ttft_ms && *ttft_ms <= *slo.ttft_ms);
    const bool tpot_met = !slo.tpot_ms || !tpot_ms || *tpot_ms <= *slo.tpot_ms;
    if (ttft_met && tpot_met) ++rep.good;
  }
  if (!all_reported) rep.server_output_tokens = -1;
  rep.ttft = Summarize(std::move(ttft));
  rep.tpot = Summarize(std::move(tpot));
  rep.itl = Summarize(std::move(itl));
  rep.e2e = Summarize(std::move(e2e));
  if (rep.duration_s > 0) {
    rep.request_rps = static_cast<double>(rep.ok) / rep.duration_s;
    rep.output_tokens_per_s = static_cast<double>(rep.output_tokens) / rep.duration_s;
    rep.total_tokens_per_s =
        static_cast<double>(rep.prompt_tokens + rep.output_tokens) / rep.duration_s;
    rep.goodput_rps = static_cast<double>(rep.good) / rep.duration_s;
  }
  if (rep.sent > 0) rep.good_fraction = static_cast<double>(rep.good) / rep.sent;
  return rep;
}

std::string ResultLines(const BenchReport& r, const std::string& prefix) {
  std::string out;
  auto line = [&](const char* name, double v) {
    absl::StrAppendFormat(&out, "RESULT %s%s=%.6g\n", prefix, name, v);
  };
  line("requests_ok", static_cast<double>(r.ok));
  line("requests_failed", static_cast<double>(r.failed));
  line("request_throughput_rps", r.request_rps);
  line("output_tokens_per_s", r.output_tokens_per_s);
  line("total_tokens_per_s", r.total_tokens_per_s);
  line("ttft_p50_ms", r.ttft.p50);
  line("ttft_p99_ms", r.ttft.p99);
  line("tpot_p50_ms", r.tpot.p50);
  line("tpot_p99_ms", r.tpot.p99);
  line("itl_p50_ms", r.itl.p50);
  line("itl_p99_ms", r.itl.p99);
  line("e2e_p50_ms", r.e2e.p50);
  line("goodput_rps", r.goodput_rps);
  line("good_fraction", r.good_fraction);
  return out;
}

std::string FormatReport(const BenchReport& r) {
  std::string out;
  absl::StrAppendFormat(&out, "requests: %d sent, %d ok, %d failed", r.sent, r.ok, r.failed);
  for (const auto& [code, n] : r.failures) absl::StrAppendFormat(&out, " [%s: %d]", code, n);
  absl::StrAppendFormat(&out, "\nduration: %.3f s\n", r.duration_s);
  absl::StrAppendFormat(&out, "throughput: %.3f req/s, %.1f output tok/s, %.1f total tok/s\n",
                        r.request_rps, r.output_tokens_per_s, r.total_tokens_per_s);
  absl::StrAppendFormat(&out, "tokens: %d prompt, %d output (server reported %d)\n",
                        r.prompt_tokens, r.output_tokens, r.server_output_tokens);
  absl::StrAppendFormat(&out, "%-6s %10s %10s %10s %10s %10s %8s\n", "ms", "mean", "p50", "p90",
                        "p99", "max", "n");
  auto row = [&](const char* name, const Summary& s) {
    absl::StrAppendFormat(&out, "%-6s %10.2f %10.2f %10.2f %10.2f %10.2f %8d\n", name, s.mean,
                          s.p50, s.p90, s.p99, s.max, s.count);
  };
  row("TTFT", r.ttft);
  row("TPOT", r.tpot);
  row("ITL", r.itl);
  row("e2e", r.e2e);
  absl::StrAppendFormat(&out, "goodput: %.3f req/s (%d of %d requests met the SLO, %.1f%%)\n",
                        r.goodput_rps, r.good, r.sent, 100.0 * r.good_fraction);
  return out;
}

}  // namespace tandem::bench
