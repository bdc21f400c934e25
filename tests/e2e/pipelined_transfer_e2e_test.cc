// Pipelined KV transfer (router --pipelined_transfer, docs/kv_transfer.md) through real clusters:
// router, prefill and decode processes, KV pulled over UCX chunk by chunk while the prefill runs.
//   * Over the layout matrix (layout_matrix_e2e_test's pairs, --max_prefill_tokens=13, aligned
//     with no block size), greedy output equals the single-rank run, and the decode node counts
//     every request as a pipelined transfer (the path was taken, not the unpipelined one).
//   * On a model slow enough that a long prompt's prefill takes a while, pulls happen while the
//     prefill still runs (tandem_kv_pipelined_chunks_before_prefill_done_total > 0).
//   * A prefill node killed mid-pipeline: the request is prefilled again on the other node and
//     its tokens still equal the reference; the cluster ends idle.
//   * A request with logprobs is pipelined too, with the same log-probabilities as unpipelined.
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

constexpr int32_t kMaxTokens = 8;

struct Pair {
  const char* name;
  std::vector<std::string> prefill;
  std::vector<std::string> decode;
};

std::vector<std::vector<int32_t>> Prompts() {
  // Lengths straddle block boundaries and the 13-token chunks (one chunk, several, a partial
  // last one).
  std::vector<std::vector<int32_t>> out;
  std::mt19937_64 rng(5);
  for (int n : {1, 7, 33, 70, 301}) {
    std::vector<int32_t> p(n);
    for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % 250);
    out.push_back(p);
  }
  return out;
}

// Counter `name` of the decode node's /metrics (0 when absent).
double DecodeCounter(LocalCluster& cluster, int index, const std::string& name) {
  absl::StatusOr<std::string> url = MetricsUrlInLog(cluster.Log("decode", index));
  EXPECT_TRUE(url.ok()) << url.status();
  if (!url.ok()) return -1;
  absl::StatusOr<std::map<std::string, double>> m = ScrapeMetrics(*url);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return -1;
  const auto it = m->find(name);
  return it == m->end() ? 0 : it->second;
}

std::vector<std::string> With(std::vector<std::string> flags, const std::string& extra) {
  flags.push_back(extra);
  return flags;
}

class PipelinedLayoutTest : public ::testing::TestWithParam<Pair> {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(SyntheticModelPath());
    reference_ =
        new std::vector<std::vector<int32_t>>(ReferenceGreedy(*model_, Prompts(), kMaxTokens));
  }
  static std::string* model_;
  static std::vector<std::vector<int32_t>>* reference_;
};
std::string* PipelinedLayoutTest::model_ = nullptr;
std::vector<std::vector<int32_t>>* PipelinedLayoutTest::reference_ = nullptr;

TEST_P(PipelinedLayoutTest, GreedyOutputEqualsSingleRankRun) {
  const Pair& pair = GetParam();
  ClusterSpec spec;
  spec.model_path = *model_;
  spec.prefill = {NodeSpec{With(pair.prefill, "--max_prefill_tokens=13")}};
  spec.decode = {NodeSpec{pair.decode}};
  spec.router_flags = {"--pipelined_transfer=true"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const auto prompts = Prompts();
  ASSERT_EQ(reference_->size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerateOutcome out =
        (*cluster)->Generate(IdsRequest(prompts[i], kMaxTokens), absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << pair.name << ": " << out.status.error_message() << "\n"
                                 << (*cluster)->LogTails();
    EXPECT_EQ(out.tokens, (*reference_)[i]) << pair.name << " prompt length " << prompts[i].size();
    EXPECT_EQ(out.final.finish_reason(), "length");
    EXPECT_EQ(out.final.retries(), 0) << (*cluster)->LogTails();
  }
  EXPECT_EQ(DecodeCounter(**cluster, 0, "tandem_kv_pipelined_transfers_total"),
            static_cast<double>(prompts.size()))
      << (*cluster)->LogTails();
  const absl::Status idle = (*cluster)->WaitIdle(absl::Seconds(10));
  EXPECT_TRUE(idle.ok()) << idle;
}

INSTANTIATE_TEST_SUITE_P(
    Pairs, PipelinedLayoutTest,
    ::testing::Values(
        Pair{"same_layout", {"--tp=2"}, {"--tp=2"}},
        Pair{"dcp2_to_1", {"--tp=4", "--dcp=2"}, {"--tp=1"}},
        Pair{"dcp1_to_2", {"--tp=1"}, {"--tp=4", "--dcp=2"}},
        Pair{"dcp2_to_4", {"--tp=4", "--dcp=2"}, {"--tp=8", "--dcp=4"}},
        Pair{"dcp4_to_2", {"--tp=8", "--dcp=4"}, {"--tp=4", "--dcp=2"}},
        Pair{"dcp2_to_3", {"--tp=4", "--dcp=2"}, {"--tp=6", "--dcp=3"}},
        Pair{"head_split_tp1_to_tp2", {"--tp=1"}, {"--tp=2"}},
        Pair{"head_merge_tp4_to_tp1", {"--tp=4"}, {"--tp=1"}},
        Pair{"pcp2_dcp2_to_dcp2", {"--pcp=2", "--dcp=2"}, {"--tp=4", "--dcp=2"}},
        Pair{"block16_to_32", {"--tp=2", "--block_size=16"}, {"--tp=2", "--block_size=32"}},
        Pair{"interleave1_to_B",
             {"--tp=4", "--dcp=2", "--interleave=1"},
             {"--tp=4", "--dcp=2", "--interleave=16"}},
        // Staged pools: each finished chunk is staged to the host mirror before it is reported.
        Pair{"staged_pcp2_dcp2_to_dcp2",
             {"--pcp=2", "--dcp=2", "--kv_staging=always"},
             {"--tp=4", "--dcp=2", "--kv_staging=always"}},
        Pair{"staged_prefill_tp2_to_tp1", {"--tp=2", "--kv_staging=always"}, {"--tp=1"}},
        Pair{
            "staged_decode_tp1_to_dcp2", {"--tp=1"}, {"--tp=4", "--dcp=2", "--kv_staging=always"}}),
    [](const ::testing::TestParamInfo<Pair>& info) { return std::string(info.param.name); });

// max_tokens 1: the request ends with the prefill's token (streamed from the router's watch);
// the decode call is stopped and the cluster ends idle — every lease and block given back.
TEST(PipelinedTransferTest, OneTokenRequestEndsAtThePrefillsToken) {
  const std::string model = SyntheticModelPath();
  const std::vector<int32_t> prompt = RandomPrompt(150, 9);
  const std::vector<int32_t> reference = ReferenceGreedy(model, {prompt}, 1)[0];
  ClusterSpec spec;
  spec.model_path = model;
  spec.prefill = {NodeSpec{{"--max_prefill_tokens=13"}}};
  spec.decode = {NodeSpec{{"--tp=1"}}};
  spec.router_flags = {"--pipelined_transfer=true"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  for (int i = 0; i < 3; ++i) {
    const GenerateOutcome out = (*cluster)->Generate(IdsRequest(prompt, 1), absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << (*cluster)->LogTails();
    EXPECT_EQ(out.tokens, reference);
    EXPECT_EQ(out.final.finish_reason(), "length");
  }
  const absl::Status idle = (*cluster)->WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << (*cluster)->LogTails();
}

// logprobs stay pipelined: the prefill's final progress carries the first token's, so every
// token of a pipelined request — the first one streamed from the router's watch (max_tokens 1)
// or from the decode node — has the same log-probabilities as the unpipelined path gives, and
// the decode node counts the requests as pipelined transfers.
TEST(PipelinedTransferTest, LogprobsStayPipelinedAndMatchTheUnpipelinedPath) {
  const std::string model = SyntheticModelPath();
  const std::vector<int32_t> prompt = RandomPrompt(70, 4);
  const std::vector<int32_t> reference = ReferenceGreedy(model, {prompt}, 6)[0];
  std::vector<std::vector<v1::TokenLogprobs>> runs;  // [pipelined][token]
  for (const bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "unpipelined");
    ClusterSpec spec;
    spec.model_path = model;
    spec.prefill = {NodeSpec{{"--tp=2", "--max_prefill_tokens=13"}}};
    spec.decode = {NodeSpec{{"--tp=1"}}};
    spec.router_flags = {absl::StrCat("--pipelined_transfer=", pipelined ? "true" : "false")};
    absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    std::vector<v1::TokenLogprobs> got;
    for (const int max_tokens : {6, 1}) {
      v1::GenerateRequest request = IdsRequest(prompt, max_tokens);
      request.mutable_sampling()->set_logprobs(2);
      const GenerateOutcome out = (*cluster)->Generate(request, absl::Seconds(60));
      ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << (*cluster)->LogTails();
      EXPECT_EQ(out.tokens,
                std::vector<int32_t>(reference.begin(), reference.begin() + max_tokens));
      ASSERT_EQ(out.logprobs.size(), out.tokens.size());
      for (const v1::TokenLogprobs& l : out.logprobs) {
        EXPECT_EQ(l.top_ids_size(), 2) << l.DebugString();
        got.push_back(l);
      }
      // The 6-token request went through a pipelined transfer. (The 1-token one ends at the
      // prefill's token from the router's watch and stops its decode call, which may not count.)
      if (max_tokens == 6) {
        EXPECT_EQ(DecodeCounter(**cluster, 0, "tandem_kv_pipelined_transfers_total"),
                  pipelined ? 1.0 : 0.0)
            << (*cluster)->LogTails();
      }
    }
    const absl::Status idle = (*cluster)->WaitIdle(absl::Seconds(15));
    EXPECT_TRUE(idle.ok()) << idle << "\n" << (*cluster)->LogTails();
    runs.push_back(std::move(got));
  }
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_EQ(runs[0][i].SerializeAsString(), runs[1][i].SerializeAsString())
        << "token " << i << ": " << runs[0][i].DebugString() << " vs " << runs[1][i].DebugString();
  }
}

// A model whose prefill of a long prompt in small chunks takes long enough to watch: pulls
// overlap it, and a prefill node can be killed while it runs.
class SlowPrefillTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SyntheticModelOptions o;
    o.seed = 11;
    o.layers = 6;
    o.hidden = 256;
    o.q_heads = 8;
    o.kv_heads = 2;
    o.head_dim = 32;
    o.intermediate = 512;
    o.context = 4096;
    model_ = new std::string(WriteTempSyntheticModel(o, "slow-prefill.gguf"));
    prompt_ = new std::vector<int32_t>(RandomPrompt(1500, 3));
    reference_ = new std::vector<int32_t>(ReferenceGreedy(*model_, {*prompt_}, kMaxTokens)[0]);
  }
  static std::string* model_;
  static std::vector<int32_t>* prompt_;
  static std::vector<int32_t>* reference_;
};
std::string* SlowPrefillTest::model_ = nullptr;
std::vector<int32_t>* SlowPrefillTest::prompt_ = nullptr;
std::vector<int32_t>* SlowPrefillTest::reference_ = nullptr;

TEST_F(SlowPrefillTest, PullsOverlapThePrefill) {
  ClusterSpec spec;
  spec.model_path = *model_;
  spec.prefill = {NodeSpec{{"--tp=2", "--max_prefill_tokens=32"}}};
  spec.decode = {NodeSpec{{"--tp=1", "--block_size=32"}}};
  spec.router_flags = {"--pipelined_transfer=true"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const GenerateOutcome out =
      (*cluster)->Generate(IdsRequest(*prompt_, kMaxTokens), absl::Seconds(120));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << (*cluster)->LogTails();
  EXPECT_EQ(out.tokens, *reference_);
  EXPECT_EQ(DecodeCounter(**cluster, 0, "tandem_kv_pipelined_transfers_total"), 1);
  // 47 chunks of 32 tokens: the decode node must have pulled some before the prefill ended.
  EXPECT_GT(DecodeCounter(**cluster, 0, "tandem_kv_pipelined_chunks_before_prefill_done_total"), 0)
      << (*cluster)->Log("decode", 0);
  // Two watchers of the prefill's progress: the decode node (to pull), to the end, and the router
  // (to stream the first token as soon as the prefill samples it). The router's watch is only a
  // head start: when the decode node's first event arrives before the watch's last message, the
  // router drops the watch (router/generate_driver_pipelined.cc), which the prefill logs as the
  // watcher going away — with the decode node pulling on persistent lanes that race is real.
  const std::string prefill_log = (*cluster)->Log("prefill", 0);
  int watches = 0, watches_ok = 0, watches_dropped = 0;
  for (size_t at = prefill_log.find("watch_kv=true"); at != std::string::npos;
       at = prefill_log.find("watch_kv=true", at + 1)) {
    const std::string line = prefill_log.substr(at, prefill_log.find('\n', at) - at);
    ++watches;
    if (absl::StrContains(line, "outcome=OK")) ++watches_ok;
    if (absl::StrContains(line, "outcome=CANCELLED") &&
        absl::StrContains(line, "the watcher went away")) {
      ++watches_dropped;
    }
  }
  EXPECT_EQ(watches, 2) << prefill_log;
  EXPECT_GE(watches_ok, 1) << prefill_log;  // the decode node's, at least
  EXPECT_EQ(watches_ok + watches_dropped, 2) << prefill_log;
  const absl::Status idle = (*cluster)->WaitIdle(absl::Seconds(10));
  EXPECT_TRUE(idle.ok()) << idle;
}

TEST_F(SlowPrefillTest, PrefillKilledMidPipelineIsRetriedOnTheOtherNode) {
  ClusterSpec spec;
  spec.model_path = *model_;
  spec.prefill = {NodeSpec{{"--max_prefill_tokens=16"}}, NodeSpec{{"--max_prefill_tokens=16"}}};
  spec.decode = {NodeSpec{{"--tp=1"}}};
  spec.router_flags = {"--pipelined_transfer=true"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  // Kill the prefill node that answered with the early handle as soon as its log shows it
  // (its prefill of 94 chunks is then still running) — from the token callback's thread is too
  // late, so a watcher thread polls the logs.
  int killed = -1;
  std::thread killer([&] {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (killed < 0 && absl::Now() < give_up) {
      for (int i = 0; i < 2; ++i) {
        if (absl::StrContains(c.Log("prefill", i), "early_handle=true")) {
          c.Kill("prefill", i);
          killed = i;
          break;
        }
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  const absl::Time start = absl::Now();
  const GenerateOutcome out = c.Generate(IdsRequest(*prompt_, kMaxTokens), absl::Seconds(120));
  killer.join();
  ASSERT_GE(killed, 0) << "no early handle seen in the prefill logs\n" << c.LogTails();
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << c.LogTails();
  EXPECT_EQ(out.tokens, *reference_);
  EXPECT_GE(out.final.retries(), 1) << c.LogTails();
  EXPECT_LT(absl::Now() - start, absl::Seconds(90));
  // The retry ran on the surviving node, pipelined as well.
  EXPECT_TRUE(absl::StrContains(c.Log("prefill", 1 - killed), "early_handle=true")) << c.LogTails();
  EXPECT_EQ(DecodeCounter(c, 0, "tandem_kv_pipelined_transfers_total"), 1);
  const absl::Status idle = c.WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle;
}

}  // namespace
}  // namespace tandem::testing
