// Pure parts of tandem-bench: seeded length distributions, Poisson arrival schedules, request
// generation, percentiles/TPOT/goodput and the SSE parser.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/status/status.h"
#include "bench/serve/arrival_schedule.h"
#include "bench/serve/latency_report.h"
#include "bench/serve/length_distribution.h"
#include "bench/serve/request_source.h"
#include "bench/serve/sse_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LengthDistributionTest, ParsesEachFormAndRejectsBadSpecsPrecisely) {
  EXPECT_EQ(LengthDistribution::Parse("fixed:256")->ToString(), "fixed:256");
  EXPECT_EQ(LengthDistribution::Parse("uniform:8:64")->ToString(), "uniform:8:64");
  EXPECT_EQ(LengthDistribution::Parse("lognormal:200:50")->ToString(), "lognormal:200:50");
  for (const char* bad : {"fixed", "fixed:0", "uniform:9:8", "uniform:1", "lognormal:0:1",
                          "lognormal:10:-1", "zipf:3", "fixed:x"}) {
    const absl::StatusOr<LengthDistribution> d = LengthDistribution::Parse(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(d.status().message(), HasSubstr(bad));
  }
}

TEST(LengthDistributionTest, SameSeedSameLengthsAndBoundsHold) {
  const LengthDistribution u = *LengthDistribution::Parse("uniform:10:20");
  Rng a(7), b(7);
  std::vector<int32_t> seen(21, 0);
  for (int i = 0; i < 5000; ++i) {
    const int32_t x = u.Sample(a);
    ASSERT_EQ(x, u.Sample(b));
    ASSERT_GE(x, 10);
    ASSERT_LE(x, 20);
    ++seen[x];
  }
  for (int v = 10; v <= 20; ++v) EXPECT_GT(seen[v], 300) << v;  // each ~455 expected
  Rng c(1);
  EXPECT_EQ(LengthDistribution::Fixed(33).Sample(c), 33);
}

TEST(LengthDistributionTest, LognormalHasTheRequestedMeanAndSd) {
  const LengthDistribution d = *LengthDistribution::Parse("lognormal:256:64");
  Rng rng(42);
  const int n = 100000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = d.Sample(rng);
    sum += x;
    sq += x * x;
  }
  const double mean = sum / n;
  const double sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 256, 2.0);
  EXPECT_NEAR(sd, 64, 2.0);
}

TEST(ArrivalScheduleTest, PoissonRateAndExponentialGaps) {
  const std::vector<absl::Duration> t =
      *PoissonArrivals({RateStage{20.0, absl::Seconds(500)}}, 0, 3);
  // 20 req/s over 500 s: 10000 expected, sd 100.
  EXPECT_NEAR(static_cast<double>(t.size()), 10000, 400);
  double sum = 0, sq = 0;
  for (size_t i = 1; i < t.size(); ++i) {
    ASSERT_GE(t[i], t[i - 1]);
    const double g = absl::ToDoubleSeconds(t[i] - t[i - 1]);
    sum += g;
    sq += g * g;
  }
  const double n = static_cast<double>(t.size() - 1);
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.05, 0.002);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 0.05, 0.003);  // exponential: sd == mean
  EXPECT_EQ(t, *PoissonArrivals({RateStage{20.0, absl::Seconds(500)}}, 0, 3));
  EXPECT_NE(t, *PoissonArrivals({RateStage{20.0, absl::Seconds(500)}}, 0, 4));
}

TEST(ArrivalScheduleTest, RampStagesKeepTheirRatesAndTheCountBoundStops) {
  const std::vector<absl::Duration> t = *PoissonArrivals(
      {RateStage{10, absl::Seconds(200)}, RateStage{40, absl::Seconds(200)}}, 0, 9);
  int64_t first = 0, second = 0;
  for (absl::Duration x : t) (x < absl::Seconds(200) ? first : second)++;
  EXPECT_NEAR(static_cast<double>(first), 2000, 200);
  EXPECT_NEAR(static_cast<double>(second), 8000, 400);
  EXPECT_LT(t.back(), absl::Seconds(400));
  EXPECT_EQ(PoissonArrivals({RateStage{5, absl::InfiniteDuration()}}, 37, 1)->size(), 37u);
}

TEST(ArrivalScheduleTest, RejectsSchedulesThatCannotEnd) {
  EXPECT_EQ(PoissonArrivals({}, 10, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PoissonArrivals({RateStage{0, absl::Seconds(1)}}, 10, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PoissonArrivals({RateStage{1, absl::InfiniteDuration()}}, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PoissonArrivals(
                {RateStage{1, absl::InfiniteDuration()}, RateStage{1, absl::Seconds(1)}}, 10, 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RequestSourceTest, RequestIDependsOnlyOnSeedAndIndex) {
  RequestSourceOptions o;
  o.seed = 5;
  o.prompt_len = *LengthDistribution::Parse("uniform:4:40");
  o.output_len = *LengthDistribution::Parse("uniform:1:9");
  o.token_id_lo = 100;
  o.token_id_hi = 110;
  const RequestSource s = *RequestSource::Create(o);
  const BenchRequest r7 = s.Make(7);
  EXPECT_EQ(s.Make(7).prompt_ids, r7.prompt_ids);
  EXPECT_EQ(s.Make(7).max_tokens, r7.max_tokens);
  EXPECT_NE(s.Make(8).prompt_ids, r7.prompt_ids);
  for (int64_t i = 0; i < 200; ++i) {
    const BenchRequest r = s.Make(i);
    ASSERT_GE(r.prompt_ids.size(), 4u);
    ASSERT_LE(r.prompt_ids.size(), 40u);
    for (int32_t id : r.prompt_ids) ASSERT_TRUE(id >= 100 && id < 110) << id;
    ASSERT_TRUE(r.max_tokens >= 1 && r.max_tokens <= 9);
  }
}

TEST(RequestSourceTest, DatasetEntriesWrapAndDatasetOutputLengthsNeedThem) {
  RequestSourceOptions o;
  BenchRequest a, b;
  a.text = "a";
  a.max_tokens = 3;
  b.chat = {{"user", "b"}};
  b.max_tokens = 0;
  o.dataset = {a, b};
  o.output_len.reset();
  EXPECT_EQ(RequestSource::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.dataset[1].max_tokens = 5;
  const RequestSource s = *RequestSource::Create(o);
  EXPECT_EQ(s.Make(0).text, "a");
  EXPECT_EQ(s.Make(0).max_tokens, 3);
  EXPECT_EQ(s.Make(3).chat[0].content, "b");
  EXPECT_EQ(s.Make(3).max_tokens, 5);
  RequestSourceOptions empty_range;
  empty_range.token_id_lo = empty_range.token_id_hi = 4;
  EXPECT_EQ(RequestSource::Create(empty_range).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestSourceTest, SharedPrefixStartsEveryRandomPromptThenItsOwnIds) {
  RequestSourceOptions o;
  o.seed = 9;
  o.prompt_len = *LengthDistribution::Parse("uniform:3:12");
  o.token_id_lo = 100;
  o.token_id_hi = 10000;
  const RequestSource plain = *RequestSource::Create(o);
  o.shared_prefix_len = 50;
  const RequestSource shared = *RequestSource::Create(o);
  const std::vector<int32_t> first = shared.Make(0).prompt_ids;
  const std::vector<int32_t> prefix(first.begin(), first.begin() + 50);
  for (int64_t i = 0; i < 20; ++i) {
    const std::vector<int32_t> p = shared.Make(i).prompt_ids;
    ASSERT_EQ(p.size(), 50 + plain.Make(i).prompt_ids.size()) << i;
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), p.begin())) << i;
    // The rest is what the same request is without a prefix: the prefix draws from its own stream.
    EXPECT_TRUE(std::equal(p.begin() + 50, p.end(), plain.Make(i).prompt_ids.begin())) << i;
    for (int32_t id : p) ASSERT_TRUE(id >= 100 && id < 10000) << id;
  }
  // The prefix is not some request's own ids.
  EXPECT_FALSE(std::equal(prefix.begin(), prefix.begin() + 3, plain.Make(0).prompt_ids.begin()));
  o.seed = 10;
  EXPECT_NE(RequestSource::Create(o)->Make(0).prompt_ids[0], prefix[0]);

  o.shared_prefix_len = -1;
  EXPECT_EQ(RequestSource::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.shared_prefix_len = 5;
  BenchRequest a;
  a.text = "a";
  o.dataset = {a};
  EXPECT_EQ(RequestSource::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LatencyReportTest, PercentilesInterpolateLikeNumpy) {
  std::vector<double> v(101);
  std::iota(v.begin(), v.end(), 0.0);  // 0..100
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 50);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 99);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 90), 3.7);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  const Summary s = Summarize({4, 1, 3, 2});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.max, 4);
}

// A request sent at `sent_ms` whose tokens arrive at `chunks_ms` (from sending) and that ends at
// the last chunk.
RequestRecord Ok(std::vector<double> chunks_ms, int64_t prompt = 10) {
  RequestRecord r;
  r.ok = true;
  for (double c : chunks_ms) r.chunk_times.push_back(absl::Milliseconds(c));
  r.e2e = r.chunk_times.back();
  r.output_tokens = static_cast<int64_t>(chunks_ms.size());
  r.server_output_tokens = r.output_tokens;
  r.prompt_tokens = prompt;
  return r;
}

TEST(LatencyReportTest, TtftTpotItlGoodputAndFailuresByCode) {
  RequestRecord failed;
  failed.error = "UNAVAILABLE";
  RequestRecord failed2 = failed;
  failed2.error = "http_503";
  // TTFT 100/200/300 ms; TPOT 10/20/30 ms (5 tokens each).
  const std::vector<RequestRecord> records = {Ok({100, 110, 120, 130, 140}),
                                              Ok({200, 220, 240, 260, 280}),
                                              Ok({300, 330, 360, 390, 420}),
                                              failed,
                                              failed2,
                                              failed};
  Slo slo;
  slo.ttft_ms = 250;
  slo.tpot_ms = 25;
  const BenchReport r = ComputeReport(records, absl::Seconds(2), slo);
  EXPECT_EQ(r.sent, 6);
  EXPECT_EQ(r.ok, 3);
  EXPECT_EQ(r.failed, 3);
  EXPECT_EQ(r.failures.at("UNAVAILABLE"), 2);
  EXPECT_EQ(r.failures.at("http_503"), 1);
  EXPECT_DOUBLE_EQ(r.ttft.p50, 200);
  EXPECT_DOUBLE_EQ(r.ttft.max, 300);
  EXPECT_DOUBLE_EQ(r.tpot.p50, 20);
  EXPECT_DOUBLE_EQ(r.tpot.mean, 20);
  EXPECT_EQ(r.itl.count, 12);
  EXPECT_DOUBLE_EQ(r.itl.max, 30);
  EXPECT_DOUBLE_EQ(r.e2e.p50, 280);
  EXPECT_EQ(r.output_tokens, 15);
  EXPECT_EQ(r.server_output_tokens, 15);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_s, 7.5);
  EXPECT_DOUBLE_EQ(r.total_tokens_per_s, 22.5);
  EXPECT_DOUBLE_EQ(r.request_rps, 1.5);
  EXPECT_EQ(r.good, 2);  // the third misses both SLOs
  EXPECT_DOUBLE_EQ(r.goodput_rps, 1.0);
  EXPECT_DOUBLE_EQ(r.good_fraction, 2.0 / 6);
  Slo tpot_only;
  tpot_only.tpot_ms = 15;
  EXPECT_EQ(ComputeReport(records, absl::Seconds(2), tpot_only).good, 1);
  EXPECT_EQ(ComputeReport(records, absl::Seconds(2), Slo()).good, 3);
  EXPECT_THAT(ResultLines(r, "x_"), HasSubstr("RESULT x_goodput_rps=1\n"));
  EXPECT_THAT(ResultLines(r, ""), HasSubstr("RESULT ttft_p50_ms=200\n"));
}

TEST(LatencyReportTest, OneTokenRequestsHaveNoTpotAndUnreportedUsageShows) {
  RequestRecord one = Ok({50});
  one.server_output_tokens = -1;
  const BenchReport r = ComputeReport({one}, absl::Seconds(1), Slo{.ttft_ms = 60, .tpot_ms = 1});
  EXPECT_EQ(r.tpot.count, 0);
  EXPECT_EQ(r.good, 1);
  EXPECT_EQ(r.server_output_tokens, -1);
}

TEST(SseParserTest, EventsSplitAnywhereAcrossReads) {
  const std::string stream =
      ": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:line1\ndata: line2\n\n"
      "id: 3\ndata: [DONE]\n\n";
  for (size_t step : {1u, 2u, 3u, 7u, 1000u}) {
    SseParser p;
    std::vector<SseEvent> got;
    for (size_t i = 0; i < stream.size(); i += step) {
      for (SseEvent& e : p.Feed(std::string_view(stream).substr(i, step))) {
        got.push_back(std::move(e));
      }
    }
    ASSERT_EQ(got.size(), 3u) << "step " << step;
    EXPECT_EQ(got[0].data, "{\"a\":1}");
    EXPECT_EQ(got[1].event, "x");
    EXPECT_EQ(got[1].data, "line1\nline2");
    EXPECT_EQ(got[2].data, "[DONE]");
    EXPECT_FALSE(p.HasPartialEvent());
  }
  SseParser cut;
  EXPECT_TRUE(cut.Feed("data: {\"a\"").empty());
  EXPECT_TRUE(cut.HasPartialEvent());
}

}  // namespace
}  // namespace tandem::bench
