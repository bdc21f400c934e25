// KV-aware routing end to end through the real router (gRPC, health polls, Generate driver) over
// fake prefill nodes that publish prefix-cache digests (fake_nodes.h): requests sharing a cached
// prefix go to the node holding it, a new prefix sticks to the node that prefilled it, and
// pending prefill work outweighs a small cached prefix. Every wait is a bounded wait on a
// condition.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/prometheus_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/router_server.h"
#include "tandem/v1/router.grpc.pb.h"
#include "tests/router/fake_nodes.h"
#include "tests/router/test_model.h"

namespace tandem::testing_router {
namespace {

using testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);  // bound of every wait in these tests
constexpr int64_t kContext = 4096;
constexpr uint64_t kSalt = 0x5eed;
constexpr int64_t kBlock = 16;

// `n` byte tokens drawn from `seed`.
std::vector<int32_t> Prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(ByteToken(static_cast<char>('a' + rng() % 26)));
  return ids;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class KvRoutingTest : public testing::Test {
 protected:
  void SetUp() override {
    for (FakePrefill* p : {&a_, &b_}) p->EnablePrefixCache(kSalt, kBlock);
  }

  // `health_interval`: how often the router polls Status (and so learns the digests).
  void StartRouter(absl::Duration health_interval = absl::Milliseconds(50)) {
    RouterOptions options;  // prefill_policy: kv_aware, the default
    options.listen = "127.0.0.1:0";
    options.prefill_nodes = {a_.address(), b_.address()};
    options.decode_nodes = {decode_.address()};
    options.health_interval = health_interval;
    options.rpc_timeout = absl::Seconds(5);
    options.decode_idle_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<RouterServer>> router =
        RouterServer::Start(options, MakeTestModel(kContext), [this](const std::string& line) {
          absl::MutexLock lock(&log_mu_);
          log_.push_back(line);
        });
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    stub_ = v1::Router::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", router_->port()),
                                                    grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (router_ != nullptr) router_->Shutdown(absl::Seconds(2));
  }

  v1::ClusterStatusResponse Cluster() {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    v1::ClusterStatusResponse response;
    const grpc::Status status = stub_->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // Waits until the router's last status of every prefill node is healthy and satisfies `pred`
  // (what the router routes by is what ClusterStatus shows), and the decode node is healthy.
  template <typename Pred>
  bool WaitForPrefillStatus(Pred pred) {
    const absl::Time deadline = absl::Now() + kWait;
    while (absl::Now() < deadline) {
      const v1::ClusterStatusResponse c = Cluster();
      int ok = 0;
      for (const v1::NodeStatus& n : c.nodes()) {
        if (!n.healthy()) continue;
        if (n.role() == v1::INSTANCE_ROLE_DECODE || pred(n.address(), n.status())) ++ok;
      }
      if (c.nodes_size() == 3 && ok == 3) return true;
      // Polling interval for an observed condition, not synchronisation by sleeping.
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // The router has seen each fake's current digest and pending tokens.
  bool WaitRouterSeesFakes() {
    return WaitForPrefillStatus([this](const std::string& address, const v1::InstanceStatus& s) {
      const FakePrefill& fake = address == a_.address() ? a_ : b_;
      return s.has_prefix_cache() &&
             static_cast<size_t>(s.prefix_cache().block_hashes_size()) == fake.cached_blocks() &&
             s.load().pending_prompt_tokens() == pending_[address];
    });
  }

  void SetPending(FakePrefill& fake, int64_t tokens) {
    fake.SetPendingPromptTokens(tokens);
    pending_[fake.address()] = tokens;
  }

  // Runs one request for `prompt`; returns the address of the prefill node whose Prefill
  // succeeded for it.
  std::string Route(const std::vector<int32_t>& prompt) {
    v1::GenerateRequest request;
    request.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
    request.set_max_tokens(2);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&ctx, request);
    v1::GenerateResponse response;
    int tokens = 0;
    while (reader->Read(&response)) tokens += response.has_token() ? 1 : 0;
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(tokens, 2);
    const size_t a = a_.handles().size(), b = b_.handles().size();
    std::string served;
    if (a > seen_a_) served = a_.address();
    if (b > seen_b_) served = served.empty() ? b_.address() : "both";
    seen_a_ = a;
    seen_b_ = b;
    return served;
  }

  std::vector<std::string> Log() {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

  std::shared_ptr<PrefillScript> prefill_script_ = std::make_shared<PrefillScript>();
  std::shared_ptr<DecodeScript> decode_script_ = std::make_shared<DecodeScript>();
  FakePrefill a_{"pa", prefill_script_};
  FakePrefill b_{"pb", prefill_script_};
  FakeDecode decode_{"d0", decode_script_};
  std::map<std::string, int64_t> pending_;
  size_t seen_a_ = 0, seen_b_ = 0;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<v1::Router::Stub> stub_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

TEST_F(KvRoutingTest, RequestsSharingACachedPrefixGoToTheNodeHoldingIt) {
  const std::vector<int32_t> system_a = Prompt(256, 1), system_b = Prompt(256, 2);
  a_.CachePrefix(system_a);
  b_.CachePrefix(system_b);
  StartRouter();
  ASSERT_TRUE(WaitRouterSeesFakes());

  // Interleaved conversations: each system prompt's requests go where it is cached, although
  // least_loaded alone would send all of them to the same (idle, first-sorting) node.
  for (uint32_t q = 0; q < 4; ++q) {
    EXPECT_EQ(Route(Concat(system_a, Prompt(40, 100 + q))), a_.address()) << q;
    EXPECT_EQ(Route(Concat(system_b, Prompt(40, 200 + q))), b_.address()) << q;
  }
  // Every one of those requests expected its 256-token system prompt cached.
  int with_prefix = 0;
  for (const std::string& line : Log()) {
    if (absl::StrContains(line, "outcome=OK")) {
      EXPECT_THAT(line, HasSubstr(" cached_prefix_tokens=256"));
      ++with_prefix;
    }
  }
  EXPECT_EQ(with_prefix, 8);
  const std::string metrics = RenderPrometheusText(router_->metrics());
  EXPECT_THAT(metrics, HasSubstr("tandem_router_prefill_expected_cached_tokens_total 2048\n"));
  EXPECT_THAT(metrics, HasSubstr("tandem_router_prefill_prompt_tokens_total 2368\n"));
}

TEST_F(KvRoutingTest, ANewPrefixSticksToTheNodeThatPrefilledItBeforeAnyPollShowsIt) {
  // One poll at start-up, then none for the test's length: what the router knows of the new
  // prefix below comes from its own prefill, not from a digest.
  StartRouter(absl::Hours(1));
  ASSERT_TRUE(WaitRouterSeesFakes());
  const FakePrefill& first_choice = a_.address() < b_.address() ? a_ : b_;
  const FakePrefill& other = a_.address() < b_.address() ? b_ : a_;
  // The first prefill lands on the node least_loaded ranks second: the first choice aborts it
  // (retryable without marking the node unhealthy, so no recovery poll runs) and the router
  // retries on the other node.
  {
    absl::MutexLock lock(&prefill_script_->mu);
    prefill_script_->failures.push_back(grpc::Status(grpc::StatusCode::ABORTED, "fake abort"));
  }
  const std::vector<int32_t> system = Prompt(512, 3);
  EXPECT_EQ(Route(Concat(system, Prompt(30, 300))), other.address());
  // Both nodes are idle and their last digests are empty, so only the router's memory of that
  // prefill sends the same system prompt there again (least_loaded would take first_choice).
  EXPECT_EQ(Route(Concat(system, Prompt(30, 301))), other.address());
  EXPECT_EQ(Route(Concat(system, Prompt(30, 302))), other.address());
  // An unrelated prompt is held nowhere: least_loaded's tie-break.
  EXPECT_EQ(Route(Prompt(300, 4)), first_choice.address());
  int expected_cached = 0;
  for (const std::string& line : Log()) {
    if (absl::StrContains(line, "outcome=OK") &&
        absl::StrContains(line, " cached_prefix_tokens=512")) {
      ++expected_cached;
    }
  }
  EXPECT_EQ(expected_cached, 2);
}

TEST_F(KvRoutingTest, PendingWorkOutweighsASmallCachedPrefix) {
  const std::vector<int32_t> prompt = Prompt(400, 5);
  // a holds the prompt's first block only, and has 2000 prompt tokens to compute first.
  a_.CachePrefix(std::vector<int32_t>(prompt.begin(), prompt.begin() + kBlock));
  SetPending(a_, 2000);
  StartRouter();
  ASSERT_TRUE(WaitRouterSeesFakes());
  EXPECT_EQ(Route(prompt), b_.address());  // 384 + 2000 on a against 400 on b

  // Once a's queue has drained, one cached block is enough to win (for a prompt b has not seen).
  const std::vector<int32_t> block = Prompt(kBlock, 6);
  a_.CachePrefix(block);
  SetPending(a_, 0);
  ASSERT_TRUE(WaitRouterSeesFakes());
  EXPECT_EQ(Route(Concat(block, Prompt(300, 7))), a_.address());  // 300 on a against 316 on b
}

}  // namespace
}  // namespace tandem::testing_router
