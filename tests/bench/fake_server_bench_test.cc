// tandem-bench's load runner and backends against in-process fake servers with known latencies
// (tests/bench/fake_servers.h): the reported percentiles must match the latencies the fakes
// were told to produce, within a scheduling slack (never below them), every request must be
// accounted for by error class, and open-loop arrivals must follow the schedule.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bench/serve/arrival_schedule.h"
#include "bench/serve/dataset.h"
#include "bench/serve/grpc_backend.h"
#include "bench/serve/latency_report.h"
#include "bench/serve/load_runner.h"
#include "bench/serve/openai_backend.h"
#include "bench/serve/request_source.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/bench/fake_servers.h"

namespace tandem::bench::testing {
namespace {

// A plaintext channel to a fake router on 127.0.0.1 (tandem-bench builds its own from --tls_*).
std::shared_ptr<grpc::Channel> Plaintext(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

// Measured latencies may exceed the planned ones by scheduling on a busy 2-core machine, never
// fall short of them (the fakes sleep at least the planned time).
constexpr double kSlackMs = 40;
constexpr int32_t kOutputTokens = 8;

RequestSource RandomSource(uint64_t seed) {
  RequestSourceOptions o;
  o.seed = seed;
  o.prompt_len = *LengthDistribution::Parse("uniform:1:5");  // 5 = the failing length
  o.output_len = LengthDistribution::Fixed(kOutputTokens);
  o.token_id_lo = 3;
  o.token_id_hi = 200;
  return *RequestSource::Create(o);
}

struct Expected {
  int64_t ok = 0, failed = 0;
  std::vector<double> ttft_ms;  // sorted, ok requests
};

Expected PlanRun(const RequestSource& source, int64_t n) {
  Expected e;
  for (int64_t i = 0; i < n; ++i) {
    const BenchRequest r = source.Make(i);
    const int64_t units = r.prompt_ids.empty() ? static_cast<int64_t>(r.chat.size())
                                               : static_cast<int64_t>(r.prompt_ids.size());
    const Plan p = PlanFor(units);
    if (p.fail) {
      ++e.failed;
    } else {
      ++e.ok;
      e.ttft_ms.push_back(absl::ToDoubleMilliseconds(p.ttft));
    }
  }
  std::sort(e.ttft_ms.begin(), e.ttft_ms.end());
  return e;
}

void ExpectWithin(double measured, double planned, const std::string& what) {
  EXPECT_GE(measured, planned - 0.5) << what;  // 0.5 ms: clock granularity
  EXPECT_LE(measured, planned + kSlackMs) << what;
}

void ExpectMatchesPlan(const BenchReport& r, const Expected& e, int64_t n) {
  EXPECT_EQ(r.sent, n);
  EXPECT_EQ(r.ok, e.ok);
  EXPECT_EQ(r.failed, e.failed);
  ASSERT_GT(e.ok, 0);
  ASSERT_GT(e.failed, 0) << "the plan should include failing requests; change the seed";
  ExpectWithin(r.ttft.p50, Percentile(e.ttft_ms, 50), "TTFT p50");
  ExpectWithin(r.ttft.p90, Percentile(e.ttft_ms, 90), "TTFT p90");
  ExpectWithin(r.ttft.p99, Percentile(e.ttft_ms, 99), "TTFT p99");
  ExpectWithin(r.ttft.max, e.ttft_ms.back(), "TTFT max");
  const double itl = absl::ToDoubleMilliseconds(kItl);
  ExpectWithin(r.tpot.p50, itl, "TPOT p50");
  ExpectWithin(r.itl.p50, itl, "ITL p50");
  EXPECT_EQ(r.tpot.count, e.ok);
  EXPECT_EQ(r.itl.count, e.ok * (kOutputTokens - 1));
  EXPECT_EQ(r.output_tokens, e.ok * kOutputTokens);
  EXPECT_EQ(r.server_output_tokens, e.ok * kOutputTokens);
  // e2e = TTFT + 7 gaps (+ the usage and end events).
  ExpectWithin(r.e2e.p50, Percentile(e.ttft_ms, 50) + (kOutputTokens - 1) * itl, "e2e p50");
}

TEST(FakeServerBenchTest, GrpcClosedLoopReportsThePlannedLatencies) {
  FakeRouter router;
  GrpcBackend backend(Plaintext(router.address()), "", /*ignore_eos=*/true);
  const RequestSource source = RandomSource(11);
  LoadOptions load;
  load.concurrency = 4;
  load.max_requests = 40;
  const LoadResult result = *RunLoad(backend, source, load);
  const BenchReport r = ComputeReport(result.records, result.duration, Slo());
  const Expected e = PlanRun(source, 40);
  ExpectMatchesPlan(r, e, 40);
  EXPECT_EQ(r.failures.at("RESOURCE_EXHAUSTED"), e.failed);
  EXPECT_LE(router.max_in_flight(), 4);
  // Goodput at a TTFT SLO between the planned 60 and 90 ms: exactly the 30 and 60 ms requests.
  Slo slo;
  slo.ttft_ms = 75;
  int64_t planned_good = 0;
  for (double t : e.ttft_ms) planned_good += t <= 60 ? 1 : 0;
  // Scheduling delay could push a 60 ms request past 75 ms: allow that direction only.
  const int64_t good = ComputeReport(result.records, result.duration, slo).good;
  EXPECT_LE(good, planned_good);
  EXPECT_GE(good, planned_good - planned_good / 4);
}

TEST(FakeServerBenchTest, GrpcOpenLoopSendsOnTheScheduleAndHonoursTheCap) {
  FakeRouter router;
  GrpcBackend backend(Plaintext(router.address()), "", true);
  const RequestSource source = RandomSource(12);
  LoadOptions load;
  load.arrivals = *PoissonArrivals({RateStage{40, absl::InfiniteDuration()}}, 30, 5);
  load.max_requests = 30;
  const LoadResult result = *RunLoad(backend, source, load);
  ASSERT_EQ(result.records.size(), 30u);
  std::vector<absl::Duration> sent;
  for (const RequestRecord& r : result.records) sent.push_back(r.sent_at);
  std::sort(sent.begin(), sent.end());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_GE(sent[i], load.arrivals[i]) << i;
    EXPECT_LE(sent[i], load.arrivals[i] + absl::Milliseconds(kSlackMs)) << i;
  }

  FakeRouter capped_router;
  GrpcBackend capped(Plaintext(capped_router.address()), "", true);
  LoadOptions burst;
  burst.arrivals = *PoissonArrivals({RateStage{2000, absl::InfiniteDuration()}}, 12, 6);
  burst.max_requests = 12;
  burst.max_concurrency = 3;
  const LoadResult b = *RunLoad(capped, source, burst);
  EXPECT_EQ(b.records.size(), 12u);
  EXPECT_EQ(capped_router.max_in_flight(), 3);  // requests last >= 30 ms; arrivals span ~6 ms
}

TEST(FakeServerBenchTest, TimeBoundStopsStartingRequestsAndLetsThemFinish) {
  FakeRouter router;
  GrpcBackend backend(Plaintext(router.address()), "", true);
  const RequestSource source = RandomSource(13);
  LoadOptions load;
  load.concurrency = 2;
  load.max_requests = 0;
  load.max_duration = absl::Milliseconds(300);
  const LoadResult result = *RunLoad(backend, source, load);
  ASSERT_GE(result.records.size(), 2u);
  for (const RequestRecord& r : result.records) {
    EXPECT_LT(r.sent_at, absl::Milliseconds(300));
    EXPECT_TRUE(r.ok || r.error == "RESOURCE_EXHAUSTED") << r.error;
  }
  EXPECT_GE(result.duration, absl::Milliseconds(300) - absl::Milliseconds(200));
  LoadOptions unbounded;
  unbounded.concurrency = 1;
  EXPECT_EQ(RunLoad(backend, source, unbounded).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FakeServerBenchTest, OpenAiCompletionsStreamReportsThePlannedLatencies) {
  const CurlGlobal curl;
  FakeOpenAi server;
  OpenAiOptions o;
  o.base_url = server.base_url();
  o.endpoint = "/v1/completions";
  o.model = "fake-model";
  OpenAiBackend backend(o);
  const RequestSource source = RandomSource(11);
  LoadOptions load;
  load.concurrency = 4;
  load.max_requests = 40;
  const LoadResult result = *RunLoad(backend, source, load);
  const BenchReport r = ComputeReport(result.records, result.duration, Slo());
  const Expected e = PlanRun(source, 40);
  ExpectMatchesPlan(r, e, 40);
  EXPECT_EQ(r.failures.at("http_503"), e.failed);
  EXPECT_LE(server.max_in_flight(), 4);
  const std::vector<nlohmann::json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 40u);
  for (const nlohmann::json& b : bodies) {
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["max_tokens"], kOutputTokens);
    EXPECT_EQ(b["model"], "fake-model");
    EXPECT_TRUE(b["prompt"].is_array());
  }
  // The prompts are the source's token ids (some request carries request 0's ids).
  const std::vector<int32_t> ids0 = source.Make(0).prompt_ids;
  EXPECT_TRUE(std::any_of(bodies.begin(), bodies.end(), [&](const nlohmann::json& b) {
    return b["prompt"].get<std::vector<int32_t>>() == ids0;
  }));
}

TEST(FakeServerBenchTest, OpenAiChatSkipsTheRoleChunkAndUsesDatasetLengths) {
  const CurlGlobal curl;
  FakeOpenAi server;
  OpenAiOptions o;
  o.base_url = server.base_url();
  o.endpoint = "/v1/chat/completions";
  OpenAiBackend backend(o);
  // 1..4 messages → planned TTFT 30..120 ms; each with its own output length.
  const std::string jsonl =
      R"({"messages":[{"role":"user","content":"a"}],"output_len":3})"
      "\n"
      R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"output_len":5})"
      "\n"
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"output_len":2})"
      "\n";
  RequestSourceOptions so;
  so.dataset = *ParseDataset(jsonl, "inline");
  so.output_len.reset();
  const RequestSource source = *RequestSource::Create(so);
  ASSERT_TRUE(backend.Check(source.Make(0)).ok());
  LoadOptions load;
  load.concurrency = 3;
  load.max_requests = 9;
  const LoadResult result = *RunLoad(backend, source, load);
  ASSERT_EQ(result.records.size(), 9u);
  for (const RequestRecord& r : result.records) {
    ASSERT_TRUE(r.ok) << r.error << ": " << r.error_detail;
    ASSERT_FALSE(r.chunk_times.empty());
    const double ttft = absl::ToDoubleMilliseconds(r.chunk_times.front());
    // The output length identifies the entry: 3 → 1 message, 5 → 2, 2 → 4.
    const int units = r.output_tokens == 3 ? 1 : r.output_tokens == 5 ? 2 : 4;
    EXPECT_EQ(static_cast<int64_t>(r.chunk_times.size()), r.output_tokens);
    ExpectWithin(ttft, 30.0 * units, absl::StrCat("TTFT of a ", units, "-message chat"));
  }
  const BenchReport rep = ComputeReport(result.records, result.duration, Slo());
  EXPECT_EQ(rep.output_tokens, 3 * (3 + 5 + 2));

  // Token ids cannot go to the chat endpoint; chat cannot go to completions.
  EXPECT_EQ(backend.Check(RandomSource(1).Make(0)).code(), absl::StatusCode::kInvalidArgument);
  OpenAiOptions c = o;
  c.endpoint = "/v1/completions";
  EXPECT_EQ(OpenAiBackend(c).Check(source.Make(0)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FakeServerBenchTest, OpenAiFailuresAreClassed) {
  const CurlGlobal curl;
  FakeOpenAi server;
  OpenAiOptions wrong_path;
  wrong_path.base_url = server.base_url();
  wrong_path.endpoint = "/v1/nothing";
  BenchRequest req;
  req.prompt_ids = {1, 2};
  req.max_tokens = 2;
  EXPECT_EQ(OpenAiBackend(wrong_path).Send(req, absl::Seconds(10)).error, "http_404");
  // A port nothing listens on: the fake's port after it is gone.
  std::string closed_url;
  {
    FakeOpenAi gone;
    closed_url = gone.base_url();
  }
  OpenAiOptions refused;
  refused.base_url = closed_url;
  const RequestRecord r = OpenAiBackend(refused).Send(req, absl::Seconds(10));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "curl_7") << r.error_detail;  // CURLE_COULDNT_CONNECT
}

TEST(DatasetTest, ShippedSampleLoadsAndErrorsNameTheLine) {
  const absl::StatusOr<std::vector<BenchRequest>> sample =
      LoadDataset(TANDEM_SOURCE_DIR "/bench/serve/data/prompts_sample.jsonl");
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->size(), 20u);
  int chats = 0;
  for (const BenchRequest& r : *sample) {
    EXPECT_GE(r.max_tokens, 1);
    chats += r.chat.empty() ? 0 : 1;
  }
  EXPECT_EQ(chats, 10);
  const auto bad = ParseDataset("{\"prompt\":\"a\"}\n\n{\"messages\":[]}\n", "x.jsonl");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("x.jsonl:3"));
  EXPECT_EQ(LoadDataset("/nonexistent.jsonl").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::bench::testing
