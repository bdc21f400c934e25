// tandem-bench: a serving load generator. Drives Tandem's router over gRPC or any
// OpenAI-compatible HTTP server with streaming requests and reports TTFT/TPOT/ITL/e2e
// percentiles, throughput and goodput (docs/benchmarks.md). Parses flags and wires; the work is
// in load_runner, the backends and latency_report.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/serve/arrival_schedule.h"
#include "bench/serve/dataset.h"
#include "bench/serve/direct_backend.h"
#include "bench/serve/grpc_backend.h"
#include "bench/serve/latency_report.h"
#include "bench/serve/load_runner.h"
#include "bench/serve/openai_backend.h"
#include "bench/serve/report_json.h"
#include "bench/serve/request_source.h"
#include "common/flag_dashes.h"
#include "serving/client_channel.h"
#include "serving/tls_flags.h"

ABSL_FLAG(std::string, backend, "grpc",
          "grpc (Tandem router), openai (OpenAI-compatible HTTP) or direct (a prefill and a decode "
          "node, no router)");
ABSL_FLAG(std::string, address, "127.0.0.1:50050", "grpc: router address host:port");
ABSL_FLAG(std::string, prefill, "", "direct: prefill node host:port");
ABSL_FLAG(std::string, decode, "", "direct: decode node host:port");
ABSL_FLAG(std::string, base_url, "http://127.0.0.1:8080", "openai: server base URL");
ABSL_FLAG(std::string, endpoint, "/v1/completions",
          "openai: /v1/completions or /v1/chat/completions");
ABSL_FLAG(std::string, model, "", "model name sent with each request (empty: server default)");
ABSL_FLAG(std::string, api_key, "",
          "openai, grpc: the router's API key / bearer token (empty: none)");
ABSL_FLAG(int32_t, concurrency, 0,
          "closed loop: requests kept in flight (used when --request_rate is empty; 0 = 1)");
ABSL_FLAG(std::string, request_rate, "",
          "open loop: Poisson arrivals at this rate, req/s; a comma list is a ramp of stages of "
          "--stage_s each");
ABSL_FLAG(double, stage_s, 0, "seconds per --request_rate stage (0: one unbounded stage)");
ABSL_FLAG(int32_t, max_concurrency, 0, "open loop: cap on requests in flight (0 = none)");
ABSL_FLAG(int64_t, num_requests, 100, "requests to send (0 = bounded by --duration_s only)");
ABSL_FLAG(double, duration_s, 0, "stop starting requests after this many seconds (0 = none)");
ABSL_FLAG(int32_t, warmup_requests, 0, "requests sent one at a time before the run, not counted");
ABSL_FLAG(std::string, prompt_len, "fixed:128",
          "random prompts: token count, fixed:N | uniform:LO:HI | lognormal:MEAN:SD");
ABSL_FLAG(std::string, output_len, "fixed:128",
          "tokens to generate, same forms, or 'dataset' (each entry's output_len)");
ABSL_FLAG(std::string, dataset, "", "JSONL of {\"prompt\":...} or {\"messages\":[...]} entries");
ABSL_FLAG(int32_t, shared_prefix_len, 0,
          "random prompts: this many token ids (drawn once from --seed) start every prompt, "
          "before its own --prompt_len ids (a shared system prompt: prefix caching)");
ABSL_FLAG(std::string, token_id_range, "100:10000",
          "random prompts: token ids drawn from [LO, HI) (must be valid for the model)");
ABSL_FLAG(bool, ignore_eos, true, "generate exactly the requested output length");
ABSL_FLAG(uint64_t, seed, 0, "seed of prompt lengths, token ids, output lengths and arrivals");
ABSL_FLAG(double, slo_ttft_ms, 0, "goodput SLO on TTFT, ms (0 = none)");
ABSL_FLAG(double, slo_tpot_ms, 0, "goodput SLO on TPOT, ms (0 = none)");
ABSL_FLAG(double, request_timeout_s, 600, "deadline of each request");
ABSL_FLAG(std::string, json_out, "", "write settings and every figure as JSON to this file");
ABSL_FLAG(std::string, result_prefix, "", "prefix of the RESULT names (e.g. tandem_c16_)");

namespace tandem::bench {
namespace {

absl::StatusOr<std::vector<RateStage>> ParseRates(const std::string& rates, double stage_s) {
  std::vector<RateStage> stages;
  for (absl::string_view r : absl::StrSplit(rates, ',')) {
    RateStage stage;
    if (!absl::SimpleAtod(r, &stage.rate_rps)) {
      return absl::InvalidArgumentError(absl::StrCat("--request_rate: '", r, "' is not a number"));
    }
    if (stage_s > 0) stage.duration = absl::Seconds(stage_s);
    stages.push_back(stage);
  }
  if (stages.size() > 1 && stage_s <= 0) {
    return absl::InvalidArgumentError("--request_rate with several rates needs --stage_s > 0");
  }
  return stages;
}

absl::StatusOr<RequestSourceOptions> SourceOptions() {
  RequestSourceOptions o;
  o.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<LengthDistribution> prompt =
      LengthDistribution::Parse(absl::GetFlag(FLAGS_prompt_len));
  if (!prompt.ok()) return prompt.status();
  o.prompt_len = *prompt;
  if (absl::GetFlag(FLAGS_output_len) == "dataset") {
    o.output_len.reset();
  } else {
    absl::StatusOr<LengthDistribution> out =
        LengthDistribution::Parse(absl::GetFlag(FLAGS_output_len));
    if (!out.ok()) return out.status();
    o.output_len = *out;
  }
  const std::vector<std::string> range = absl::StrSplit(absl::GetFlag(FLAGS_token_id_range), ':');
  if (range.size() != 2 || !absl::SimpleAtoi(range[0], &o.token_id_lo) ||
      !absl::SimpleAtoi(range[1], &o.token_id_hi)) {
    return absl::InvalidArgumentError("--token_id_range must be LO:HI");
  }
  o.shared_prefix_len = absl::GetFlag(FLAGS_shared_prefix_len);
  if (!absl::GetFlag(FLAGS_dataset).empty()) {
    absl::StatusOr<std::vector<BenchRequest>> data = LoadDataset(absl::GetFlag(FLAGS_dataset));
    if (!data.ok()) return data.status();
    o.dataset = std::move(data).value();
  }
  return o;
}

nlohmann::json Settings() {
  return {{"backend", absl::GetFlag(FLAGS_backend)},
          {"address", absl::GetFlag(FLAGS_address)},
          {"prefill", absl::GetFlag(FLAGS_prefill)},
          {"decode", absl::GetFlag(FLAGS_decode)},
          {"base_url", absl::GetFlag(FLAGS_base_url)},
          {"endpoint", absl::GetFlag(FLAGS_endpoint)},
          {"model", absl::GetFlag(FLAGS_model)},
          {"concurrency", absl::GetFlag(FLAGS_concurrency)},
          {"request_rate", absl::GetFlag(FLAGS_request_rate)},
          {"stage_s", absl::GetFlag(FLAGS_stage_s)},
          {"max_concurrency", absl::GetFlag(FLAGS_max_concurrency)},
          {"num_requests", absl::GetFlag(FLAGS_num_requests)},
          {"duration_s", absl::GetFlag(FLAGS_duration_s)},
          {"warmup_requests", absl::GetFlag(FLAGS_warmup_requests)},
          {"prompt_len", absl::GetFlag(FLAGS_prompt_len)},
          {"output_len", absl::GetFlag(FLAGS_output_len)},
          {"dataset", absl::GetFlag(FLAGS_dataset)},
          {"token_id_range", absl::GetFlag(FLAGS_token_id_range)},
          {"shared_prefix_len", absl::GetFlag(FLAGS_shared_prefix_len)},
          {"ignore_eos", absl::GetFlag(FLAGS_ignore_eos)},
          {"seed", absl::GetFlag(FLAGS_seed)},
          {"request_timeout_s", absl::GetFlag(FLAGS_request_timeout_s)}};
}

int Fail(const absl::Status& status) {
  std::cerr << "tandem-bench: " << status << "\n";
  return 2;
}

int Main() {
  absl::StatusOr<RequestSourceOptions> source_options = SourceOptions();
  if (!source_options.ok()) return Fail(source_options.status());
  const size_t dataset_size = source_options->dataset.size();
  absl::StatusOr<RequestSource> source = RequestSource::Create(*std::move(source_options));
  if (!source.ok()) return Fail(source.status());

  // TLS of the grpc/direct channels (--tls_ca, and --tls_cert/--tls_key for mutual-TLS nodes);
  // openai: --tls_ca verifies an https --base_url.
  const absl::StatusOr<TlsConfig> tls = LoadTlsConfig(TlsFilesFromFlags(), TlsRole::kClient);
  if (!tls.ok()) return Fail(tls.status());
  const CurlGlobal curl_global;
  std::unique_ptr<Backend> backend;
  const std::string kind = absl::GetFlag(FLAGS_backend);
  if (kind == "grpc") {
    backend = std::make_unique<GrpcBackend>(
        CreateClientChannel(absl::GetFlag(FLAGS_address), GrpcChannelCredentials(*tls),
                            absl::GetFlag(FLAGS_api_key)),
        absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_ignore_eos));
  } else if (kind == "openai") {
    OpenAiOptions o;
    o.base_url = absl::GetFlag(FLAGS_base_url);
    o.endpoint = absl::GetFlag(FLAGS_endpoint);
    o.model = absl::GetFlag(FLAGS_model);
    o.api_key = absl::GetFlag(FLAGS_api_key);
    o.ca_file = tls->files.ca;
    o.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
    auto openai = std::make_unique<OpenAiBackend>(o);
    // Every dataset entry (or the first random request) must fit the endpoint.
    const size_t forms = std::max<size_t>(1, dataset_size);
    for (size_t i = 0; i < forms; ++i) {
      if (absl::Status s = openai->Check(source->Make(static_cast<int64_t>(i))); !s.ok()) {
        return Fail(s);
      }
    }
    backend = std::move(openai);
  } else if (kind == "direct") {
    if (absl::GetFlag(FLAGS_prefill).empty() || absl::GetFlag(FLAGS_decode).empty()) {
      return Fail(absl::InvalidArgumentError("--backend=direct needs --prefill and --decode"));
    }
    if (absl::Status s = DirectBackend::Check(source->Make(0)); !s.ok()) return Fail(s);
    backend = std::make_unique<DirectBackend>(
        absl::GetFlag(FLAGS_prefill), absl::GetFlag(FLAGS_decode), GrpcChannelCredentials(*tls));
  } else {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--backend must be grpc, openai or direct, got '", kind, "'")));
  }

  LoadOptions load;
  load.max_requests = absl::GetFlag(FLAGS_num_requests);
  if (absl::GetFlag(FLAGS_duration_s) > 0) {
    load.max_duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  }
  load.request_timeout = absl::Seconds(absl::GetFlag(FLAGS_request_timeout_s));
  load.max_concurrency = absl::GetFlag(FLAGS_max_concurrency);
  if (absl::GetFlag(FLAGS_request_rate).empty()) {
    load.concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  } else {
    absl::StatusOr<std::vector<RateStage>> stages =
        ParseRates(absl::GetFlag(FLAGS_request_rate), absl::GetFlag(FLAGS_stage_s));
    if (!stages.ok()) return Fail(stages.status());
    if (stages->back().duration == absl::InfiniteDuration() &&
        load.max_duration != absl::InfiniteDuration()) {
      stages->back().duration = load.max_duration;
    }
    absl::StatusOr<std::vector<absl::Duration>> arrivals =
        PoissonArrivals(*stages, load.max_requests, absl::GetFlag(FLAGS_seed));
    if (!arrivals.ok()) return Fail(arrivals.status());
    if (arrivals->empty()) {
      return Fail(absl::InvalidArgumentError("the arrival schedule is empty (rate x time < 1)"));
    }
    load.arrivals = std::move(arrivals).value();
  }
  if (isatty(fileno(stdout))) load.progress = &std::cout;

  // Warm-up: distinct indices past any run index, one at a time; failures stop the benchmark.
  for (int32_t i = 0; i < absl::GetFlag(FLAGS_warmup_requests); ++i) {
    const RequestRecord rec =
        backend->Send(source->Make(int64_t{1} << 40 | i), load.request_timeout);
    if (!rec.ok) {
      return Fail(absl::UnavailableError(
          absl::StrCat("warm-up request ", i, " failed: ", rec.error, ": ", rec.error_detail)));
    }
  }

  absl::StatusOr<LoadResult> result = RunLoad(*backend, *source, load);
  if (!result.ok()) return Fail(result.status());
  Slo slo;
  if (absl::GetFlag(FLAGS_slo_ttft_ms) > 0) slo.ttft_ms = absl::GetFlag(FLAGS_slo_ttft_ms);
  if (absl::GetFlag(FLAGS_slo_tpot_ms) > 0) slo.tpot_ms = absl::GetFlag(FLAGS_slo_tpot_ms);
  const BenchReport report = ComputeReport(result->records, result->duration, slo);
  for (const RequestRecord& r : result->records) {
    if (!r.ok) {  // one example per failure class helps more than a count alone
      std::cerr << "tandem-bench: first failure (" << r.error << "): " << r.error_detail << "\n";
      break;
    }
  }
  std::cout << FormatReport(report) << ResultLines(report, absl::GetFlag(FLAGS_result_prefix))
            << std::flush;
  if (!absl::GetFlag(FLAGS_json_out).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_json_out));
    out << ReportToJson(report, slo, Settings()).dump(2) << "\n";
    if (!out) {
      return Fail(absl::InternalError(
          absl::StrCat("cannot write --json_out ", absl::GetFlag(FLAGS_json_out))));
    }
  }
  return report.failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tandem-bench --backend=grpc --address=HOST:PORT | --backend=openai --base_url=URL "
      "[--concurrency=N | --request_rate=R[,R...]] [--num_requests=N] [--duration_s=S] ...");
  tandem::NormalizeFlagDashes(argc, argv);
  absl::ParseCommandLine(argc, argv);
  return tandem::bench::Main();
}
