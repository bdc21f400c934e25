// KV-aware routing through a real cluster (issue 18): two prefill nodes with the prefix cache on,
// one decode node, the router's default `kv_aware` prefill policy. A request whose prompt starts
// with a 2,000-token "system prompt" is prefilled on one node; every later request sharing that
// prefix — sent right after it (before the router's next Status poll could have seen the node's
// cache: the router counts what it just prefilled there), one at a time after a poll, and four at
// once — must go to that node and find the whole prefix cached there. Which node computed what
// is read from each node's own /metrics (prompt tokens, cache hits), and every request's tokens
// must equal the cold single-rank reference.
//
// The TTFT these hits buy is a speed figure, measured by the load generator
// (bench/serve/run.sh, docs/PERFORMANCE.md), not asserted here; the test prints it.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

constexpr int kPrefixTokens = 2000;  // a multiple of the cache block (block_size 16, dcp 1)
constexpr int kTailTokens = 24;
constexpr int32_t kMaxTokens = 4;
constexpr int kPrompts = 9;  // 1 cold, 1 at once, 3 one at a time, 4 together

std::vector<std::vector<int32_t>> Prompts() {
  const std::vector<int32_t> system = RandomPrompt(kPrefixTokens, 101);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kPrompts; ++i) {
    std::vector<int32_t> p = system;
    for (int32_t t : RandomPrompt(kTailTokens, 200 + i)) p.push_back(t);
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// Per prefill node: prompt tokens received and tokens served from its cache, so far.
struct NodeCounts {
  double prompt_tokens = 0;
  double hit_tokens = 0;
};

class KvRoutingE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = SyntheticModelPath();
    prompts_ = Prompts();
    reference_ = ReferenceGreedy(model_, prompts_, kMaxTokens);
    ClusterSpec spec;
    spec.model_path = model_;
    spec.prefill = {NodeSpec{{"--tp=1", "--prefix_cache=true"}},
                    NodeSpec{{"--tp=1", "--prefix_cache=true"}}};
    spec.decode = {NodeSpec{{"--tp=1"}}};
    // Polls far apart: the request right after the cold one must be routed by what the router
    // itself prefilled there, not by a fresh digest.
    spec.router_flags = {"--prefill_policy=kv_aware", "--health_interval_ms=3000"};
    absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::string> url = MetricsUrlInLog(cluster_->Log("prefill", i));
      ASSERT_TRUE(url.ok()) << url.status();
      metrics_urls_.push_back(*url);
    }
  }

  std::vector<NodeCounts> Counts() {
    std::vector<NodeCounts> counts;
    for (const std::string& url : metrics_urls_) {
      absl::StatusOr<std::map<std::string, double>> m = ScrapeMetrics(url);
      EXPECT_TRUE(m.ok()) << m.status();
      if (!m.ok()) return {};
      counts.push_back(
          {(*m)["tandem_prompt_tokens_total"], (*m)["tandem_prefix_cache_hits_total"]});
    }
    return counts;
  }

  // Sends prompt `i` and checks its tokens; returns its TTFT.
  absl::Duration Send(int i) {
    const GenerateOutcome out =
        cluster_->Generate(IdsRequest(prompts_[i], kMaxTokens), absl::Seconds(120));
    EXPECT_TRUE(out.status.ok()) << "prompt " << i << ": " << out.status.error_message() << "\n"
                                 << cluster_->LogTails();
    EXPECT_EQ(out.tokens, reference_[i]) << "prompt " << i;
    return absl::Microseconds(out.final.ttft_us());
  }

  // Since `before`: exactly `requests` prompts went to node `node` (none to the other), each
  // finding the whole shared prefix cached when `cached`.
  void ExpectServedBy(const std::vector<NodeCounts>& before, int node, int requests, bool cached,
                      const std::string& what) {
    const std::vector<NodeCounts> after = Counts();
    ASSERT_EQ(after.size(), 2u);
    const double prompt_len = kPrefixTokens + kTailTokens;
    EXPECT_EQ(after[node].prompt_tokens - before[node].prompt_tokens, requests * prompt_len)
        << what << ": prompts were not all routed to prefill node " << node;
    EXPECT_EQ(after[node].hit_tokens - before[node].hit_tokens,
              cached ? requests * kPrefixTokens : 0)
        << what;
    EXPECT_EQ(after[1 - node].prompt_tokens, before[1 - node].prompt_tokens)
        << what << ": prefill node " << 1 - node << " got a prompt";
  }

  std::string model_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::vector<int32_t>> reference_;
  std::unique_ptr<LocalCluster> cluster_;
  std::vector<std::string> metrics_urls_;
};

TEST_F(KvRoutingE2eTest, PromptsSharingALongPrefixGoToTheNodeThatCachesIt) {
  std::vector<NodeCounts> before = Counts();
  ASSERT_EQ(before.size(), 2u);
  const absl::Duration cold = Send(0);
  std::vector<NodeCounts> after = Counts();
  ASSERT_EQ(after.size(), 2u);
  const int home = after[0].prompt_tokens > before[0].prompt_tokens ? 0 : 1;
  ExpectServedBy(before, home, 1, /*cached=*/false, "the cold request");

  // At once: the router has not polled the node's new digest yet.
  before = after;
  const absl::Duration warm = Send(1);
  ExpectServedBy(before, home, 1, /*cached=*/true, "the request right after the cold one");
  std::printf("kv_routing: TTFT cold %.1f ms, shared %d-token prefix cached %.1f ms (%.2fx)\n",
              absl::ToDoubleMilliseconds(cold), kPrefixTokens, absl::ToDoubleMilliseconds(warm),
              absl::FDivDuration(warm, cold));

  // One at a time, across the router's polls of both nodes' digests.
  for (int i = 2; i < 5; ++i) {
    before = Counts();
    Send(i);
    ExpectServedBy(before, home, 1, /*cached=*/true, absl::StrCat("prompt ", i));
  }

  // Together: the node that holds the prefix has the least work for each of them, even with the
  // others' tails pending there.
  before = Counts();
  std::vector<std::thread> threads;
  for (int i = 5; i < kPrompts; ++i) threads.emplace_back([this, i] { Send(i); });
  for (std::thread& t : threads) t.join();
  ExpectServedBy(before, home, kPrompts - 5, /*cached=*/true, "four requests at once");

  const absl::Status idle = cluster_->WaitIdle(absl::Seconds(10));
  EXPECT_TRUE(idle.ok()) << idle;
}

}  // namespace
}  // namespace tandem::testing
