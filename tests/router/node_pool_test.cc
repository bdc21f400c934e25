#include "router/node_pool.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/cancellation.h"
#include "common/prefix_hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;

constexpr auto kPrefill = v1::INSTANCE_ROLE_PREFILL;
constexpr auto kDecode = v1::INSTANCE_ROLE_DECODE;

class NodePoolTest : public testing::Test {
 protected:
  NodePool MakePool(PolicyKind policy = PolicyKind::kLeastLoaded) {
    return NodePool("smol", policy, policy, [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      log_.push_back(line);
    });
  }
  static v1::InstanceStatus Status(v1::InstanceRole role, int running, int queued, int free,
                                   std::string model = "smol") {
    v1::InstanceStatus s;
    s.set_role(role);
    s.set_model(std::move(model));
    s.mutable_load()->set_running(running);
    s.mutable_load()->set_queued(queued);
    s.mutable_load()->set_free_blocks(free);
    s.mutable_load()->set_total_blocks(100);
    return s;
  }
  std::vector<std::string> Log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

  const absl::Time t0_ = absl::FromUnixSeconds(1000);
  absl::Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
};

TEST_F(NodePoolTest, StaticNodesAreCheckedAndStartUnhealthy) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("127.0.0.1:1", kDecode).ok());
  const absl::Status dup = pool.AddStatic("127.0.0.1:1", kDecode);
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(dup.message(), "decode node 127.0.0.1:1 is listed twice");
  // The same address may serve the other role.
  EXPECT_TRUE(pool.AddStatic("127.0.0.1:1", kPrefill).ok());
  const absl::Status bad = pool.AddStatic("x:1", v1::INSTANCE_ROLE_UNSPECIFIED);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "node x:1 has role unspecified (want prefill or decode)");
  EXPECT_EQ(pool.AddStatic("", kDecode).message(), "node address is empty");

  const absl::StatusOr<NodeLease> none = pool.Pick(kDecode, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(none.status().message(), "no healthy decode node (1 known, none healthy)");
}

TEST_F(NodePoolTest, NoNodeOfARoleIsUnavailableNamingTheRole) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("a:1", kDecode).ok());
  pool.ReportStatus("a:1", kDecode, Status(kDecode, 0, 0, 10), t0_);
  const absl::StatusOr<NodeLease> none = pool.Pick(kPrefill, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(none.status().message(), "no healthy prefill node (0 known, none healthy)");
}

// A request's cancellation ends its wait for a healthy node at once: already cancelled (no wait
// at all), or cancelled while it waits (woken, not polled). The deadline is an hour away, so a
// wait that missed the cancellation would run into the test's timeout.
TEST_F(NodePoolTest, AwaitHealthyEndsAtTheRequestsCancellation) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("a:1", kPrefill).ok());  // known, not yet healthy
  const absl::Time far = absl::Now() + absl::Hours(1);
  CancellationToken cancelled;
  cancelled.Cancel();
  EXPECT_FALSE(pool.AwaitHealthy(kPrefill, far, &cancelled));

  CancellationToken cancel;
  const absl::Time began = absl::Now();
  std::thread client([&cancel] { cancel.Cancel(); });
  EXPECT_FALSE(pool.AwaitHealthy(kPrefill, far, &cancel));
  client.join();
  EXPECT_LT(absl::Now() - began, absl::Seconds(30));
  // Without a token the wait is for health (or the deadline) only.
  EXPECT_FALSE(pool.AwaitHealthy(kPrefill, absl::Now()));
}

// A request waiting for a healthy node is woken by the poll that finds one (the driver's 100 ms
// slice between picks is a bound, not a poll interval). The deadline is an hour away: a wait
// that missed the health change would run into the test's timeout.
TEST_F(NodePoolTest, AwaitHealthyEndsWhenAPollFindsANodeHealthy) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("a:1", kPrefill).ok());  // known, not yet healthy
  const absl::Time far = absl::Now() + absl::Hours(1);
  std::thread poller(
      [&pool, this] { pool.ReportStatus("a:1", kPrefill, Status(kPrefill, 0, 0, 10), t0_); });
  EXPECT_TRUE(pool.AwaitHealthy(kPrefill, far));
  poller.join();
  EXPECT_TRUE(pool.Pick(kPrefill, {}).ok());
}

TEST_F(NodePoolTest, HealthFollowsPollsAndFailuresWithLoggedTransitions) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("a:1", kPrefill).ok());
  pool.ReportStatus("a:1", kPrefill, Status(kPrefill, 0, 0, 10), t0_);
  ASSERT_TRUE(pool.Pick(kPrefill, {}).ok());
  pool.ReportStatus("a:1", kPrefill, Status(kPrefill, 1, 0, 9), t0_);  // no transition
  pool.ReportFailure("a:1", kPrefill, absl::UnavailableError("connection refused"));
  EXPECT_EQ(pool.Pick(kPrefill, {}).status().code(), absl::StatusCode::kUnavailable);
  pool.ReportStatus("a:1", kPrefill, Status(kPrefill, 0, 0, 10), t0_);
  EXPECT_TRUE(pool.Pick(kPrefill, {}).ok());
  EXPECT_THAT(Log(), ElementsAre("prefill node a:1 is healthy",
                                 "prefill node a:1 is unhealthy: UNAVAILABLE: connection refused",
                                 "prefill node a:1 is healthy"));
}

TEST_F(NodePoolTest, WrongRoleOrModelMakesANodeUnhealthy) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("a:1", kPrefill).ok());
  ASSERT_TRUE(pool.AddStatic("b:1", kPrefill).ok());
  pool.ReportStatus("a:1", kPrefill, Status(kDecode, 0, 0, 10), t0_);
  pool.ReportStatus("b:1", kPrefill, Status(kPrefill, 0, 0, 10, "other"), t0_);
  EXPECT_EQ(pool.Pick(kPrefill, {}).status().code(), absl::StatusCode::kUnavailable);
  const v1::ClusterStatusResponse snap = pool.Snapshot(t0_);
  ASSERT_EQ(snap.nodes_size(), 2);
  EXPECT_EQ(snap.nodes(0).last_error(), "node reports role decode, expected prefill");
  EXPECT_EQ(snap.nodes(1).last_error(), "node serves model 'other', the router serves 'smol'");
}

TEST_F(NodePoolTest, ADrainingNodeGetsNoNewCalls) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("a:1", kDecode).ok());
  ASSERT_TRUE(pool.AddStatic("b:1", kDecode).ok());
  pool.ReportStatus("a:1", kDecode, Status(kDecode, 0, 0, 90), t0_);
  pool.ReportStatus("b:1", kDecode, Status(kDecode, 5, 0, 10), t0_);
  v1::InstanceStatus draining = Status(kDecode, 0, 0, 90);
  draining.set_draining(true);
  pool.ReportStatus("a:1", kDecode, draining, t0_);
  for (int i = 0; i < 3; ++i) {
    const absl::StatusOr<NodeLease> lease = pool.Pick(kDecode, {});
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(lease->address(), "b:1");  // although a:1 is the least loaded
  }
  const v1::ClusterStatusResponse snap = pool.Snapshot(t0_);
  ASSERT_EQ(snap.nodes_size(), 2);
  EXPECT_EQ(snap.nodes(0).last_error(), "node is draining (shutting down)");
}

TEST_F(NodePoolTest, LeastLoadedUsesPolledLoadAndInflightCalls) {
  NodePool pool = MakePool(PolicyKind::kLeastLoaded);
  for (const char* a : {"a:1", "b:1", "c:1"}) ASSERT_TRUE(pool.AddStatic(a, kDecode).ok());
  pool.ReportStatus("a:1", kDecode, Status(kDecode, 2, 0, 50), t0_);
  pool.ReportStatus("b:1", kDecode, Status(kDecode, 1, 0, 50), t0_);
  pool.ReportStatus("c:1", kDecode, Status(kDecode, 1, 0, 50), t0_);
  absl::StatusOr<NodeLease> first = pool.Pick(kDecode, {});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->address(), "b:1");  // b and c tie; b sorts first
  absl::StatusOr<NodeLease> second = pool.Pick(kDecode, {});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->address(), "c:1");  // b has a call in flight now
  EXPECT_EQ(pool.Pick(kDecode, {"b:1", "c:1"})->address(), "a:1");
}

TEST_F(NodePoolTest, LeaseReleaseEndsTheInflightCount) {
  NodePool pool = MakePool(PolicyKind::kLeastLoaded);
  for (const char* a : {"a:1", "b:1"}) ASSERT_TRUE(pool.AddStatic(a, kDecode).ok());
  pool.ReportStatus("a:1", kDecode, Status(kDecode, 0, 0, 50), t0_);
  pool.ReportStatus("b:1", kDecode, Status(kDecode, 0, 0, 50), t0_);
  {
    absl::StatusOr<NodeLease> lease = pool.Pick(kDecode, {});
    EXPECT_EQ(lease->address(), "a:1");
    EXPECT_EQ(pool.Pick(kDecode, {})->address(), "b:1");
  }
  EXPECT_EQ(pool.Pick(kDecode, {})->address(), "a:1");
}

// kv_aware over prefill nodes with digests: 16-token blocks, salt 5.
constexpr uint64_t kSalt = 5;
constexpr int64_t kBlock = 16;

std::vector<int32_t> Tokens(int n, int32_t from) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

v1::InstanceStatus WithDigest(v1::InstanceStatus s, const std::vector<int32_t>& cached,
                              int64_t pending = 0) {
  v1::PrefixCacheDigest* d = s.mutable_prefix_cache();
  d->set_salt(kSalt);
  d->set_block_tokens(kBlock);
  for (const uint64_t h : PrefixHashChain(kSalt, cached, kBlock)) d->add_block_hashes(h);
  s.mutable_load()->set_pending_prompt_tokens(pending);
  return s;
}

TEST_F(NodePoolTest, KvAwarePicksTheNodeHoldingThePromptPrefix) {
  NodePool pool("smol", PolicyKind::kKvAware, PolicyKind::kLeastLoaded, [](const std::string&) {});
  for (const char* a : {"a:1", "b:1"}) ASSERT_TRUE(pool.AddStatic(a, kPrefill).ok());
  const std::vector<int32_t> system = Tokens(160, 100);  // 10 blocks
  std::vector<int32_t> prompt = system;
  prompt.push_back(7);
  pool.ReportStatus("a:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 90), {}), t0_);
  pool.ReportStatus("b:1", kPrefill, WithDigest(Status(kPrefill, 1, 0, 10), system), t0_);
  PromptPrefixHashes hashes(prompt);
  absl::StatusOr<NodeLease> lease = pool.Pick(kPrefill, {}, &hashes);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->address(), "b:1");  // least_loaded would take a
  EXPECT_EQ(lease->cached_prefix_tokens(), 160);
  EXPECT_EQ(hashes.chains_computed(), 1);  // both nodes share salt and block size
  // Without the prompt (a decode-style pick) there is nothing to score: least_loaded's choice.
  EXPECT_EQ(pool.Pick(kPrefill, {})->address(), "a:1");
}

TEST_F(NodePoolTest, KvAwareCountsPolledAndInflightPendingTokens) {
  NodePool pool("smol", PolicyKind::kKvAware, PolicyKind::kLeastLoaded, [](const std::string&) {});
  for (const char* a : {"a:1", "b:1"}) ASSERT_TRUE(pool.AddStatic(a, kPrefill).ok());
  const std::vector<int32_t> prompt = Tokens(320, 100);
  // a holds one block but reports 1000 prompt tokens waiting: 304 + 1000 against b's 320 + 0.
  pool.ReportStatus("a:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), Tokens(16, 100), 1000),
                    t0_);
  pool.ReportStatus("b:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}), t0_);
  const std::vector<int32_t> other = Tokens(600, 5000);
  PromptPrefixHashes other_hashes(other);
  {
    PromptPrefixHashes hashes(prompt);
    absl::StatusOr<NodeLease> first = pool.Pick(kPrefill, {}, &hashes);
    EXPECT_EQ(first->address(), "b:1");
    EXPECT_EQ(first->cached_prefix_tokens(), 0);
    // While that call is in flight b has 320 tokens pending in this router (it polled 0): an
    // unrelated 600-token prompt costs 600 + 1000 on a and 600 + 320 on b.
    EXPECT_EQ(pool.Pick(kPrefill, {}, &other_hashes)->address(), "b:1");
    // a's load is gone: 600 against 920.
    pool.ReportStatus("a:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}, 0), t0_);
    EXPECT_EQ(pool.Pick(kPrefill, {}, &other_hashes)->address(), "a:1");
    pool.ReportStatus("a:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}, 400), t0_);
    EXPECT_EQ(pool.Pick(kPrefill, {}, &other_hashes)->address(), "b:1");  // 1000 > 920
    // b reports more pending work than this router knows of (another router's): it counts.
    pool.ReportStatus("b:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}, 500), t0_);
    EXPECT_EQ(pool.Pick(kPrefill, {}, &other_hashes)->address(), "a:1");  // 1000 < 1100
  }
  // b's call ended (its 320 tokens are no longer pending here) but b still reports 500.
  EXPECT_EQ(pool.Pick(kPrefill, {}, &other_hashes)->address(), "a:1");  // 1000 < 1100
  pool.ReportStatus("b:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}, 0), t0_);
  EXPECT_EQ(pool.Pick(kPrefill, {}, &other_hashes)->address(), "b:1");  // 1000 > 600
}

TEST_F(NodePoolTest, KvAwareRemembersWhatItPrefilledUntilAPollAnswers) {
  NodePool pool("smol", PolicyKind::kKvAware, PolicyKind::kLeastLoaded, [](const std::string&) {});
  for (const char* a : {"a:1", "b:1"}) ASSERT_TRUE(pool.AddStatic(a, kPrefill).ok());
  pool.ReportStatus("a:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}), t0_);
  pool.ReportStatus("b:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}), t0_);
  const std::vector<int32_t> prompt = Tokens(200, 100);
  PromptPrefixHashes hashes(prompt);
  pool.NotePrefilled("b:1", hashes, t0_ + absl::Milliseconds(10));
  // Before any poll shows it, b is taken to hold the prompt's 12 full blocks.
  EXPECT_EQ(pool.Pick(kPrefill, {}, &hashes)->cached_prefix_tokens(), 192);
  EXPECT_EQ(pool.Pick(kPrefill, {}, &hashes)->address(), "b:1");
  // A poll that started before the prefill ended does not speak for it...
  pool.ReportStatus("b:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}), t0_,
                    t0_ + absl::Milliseconds(20));
  EXPECT_EQ(pool.Pick(kPrefill, {}, &hashes)->address(), "b:1");
  // ...one that started after it does: b evicted it (or never cached it), so nothing is held.
  pool.ReportStatus("b:1", kPrefill, WithDigest(Status(kPrefill, 0, 0, 50), {}),
                    t0_ + absl::Milliseconds(30), t0_ + absl::Milliseconds(40));
  absl::StatusOr<NodeLease> after = pool.Pick(kPrefill, {}, &hashes);
  EXPECT_EQ(after->address(), "a:1");
  EXPECT_EQ(after->cached_prefix_tokens(), 0);
  // A node without a digest is not assumed to cache anything.
  pool.ReportStatus("a:1", kPrefill, Status(kPrefill, 0, 0, 50), t0_);
  pool.NotePrefilled("a:1", hashes, t0_ + absl::Seconds(1));
  EXPECT_EQ(pool.Pick(kPrefill, {"b:1"}, &hashes)->cached_prefix_tokens(), 0);
}

TEST_F(NodePoolTest, HeartbeatRegistersAndExpiryDrops) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("s:1", kDecode).ok());
  EXPECT_EQ(*pool.Heartbeat("h:1", kDecode, absl::Milliseconds(500), t0_), true);
  EXPECT_EQ(*pool.Heartbeat("h:1", kDecode, absl::Milliseconds(500), t0_ + absl::Milliseconds(300)),
            false);
  EXPECT_EQ(*pool.Heartbeat("s:1", kDecode, absl::Milliseconds(1), t0_), false);  // static stays
  pool.Expire(t0_ + absl::Milliseconds(700));  // 400 ms since the last heartbeat: kept
  v1::ClusterStatusResponse snap = pool.Snapshot(t0_ + absl::Milliseconds(700));
  ASSERT_EQ(snap.nodes_size(), 2);
  EXPECT_EQ(snap.nodes(0).address(), "h:1");
  EXPECT_EQ(snap.nodes(0).source(), "heartbeat");
  EXPECT_EQ(snap.nodes(1).source(), "static");
  pool.Expire(t0_ + absl::Milliseconds(801));
  snap = pool.Snapshot(t0_ + absl::Milliseconds(801));
  ASSERT_EQ(snap.nodes_size(), 1);
  EXPECT_EQ(snap.nodes(0).address(), "s:1");
  EXPECT_THAT(Log(), ElementsAre("decode node h:1 registered by heartbeat (ttl 500 ms)",
                                 "decode node h:1 dropped: no heartbeat for 501 ms (ttl 500 ms)"));
}

TEST_F(NodePoolTest, HeartbeatArgumentsAreChecked) {
  NodePool pool = MakePool();
  const absl::StatusOr<bool> ttl = pool.Heartbeat("h:1", kDecode, absl::ZeroDuration(), t0_);
  EXPECT_EQ(ttl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ttl.status().message(), "heartbeat ttl must be > 0 ms (got 0)");
  EXPECT_EQ(pool.Heartbeat("", kDecode, absl::Seconds(1), t0_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      pool.Heartbeat("h:1", v1::INSTANCE_ROLE_UNSPECIFIED, absl::Seconds(1), t0_).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(NodePoolTest, SnapshotListsPrefillThenDecodeWithLastStatus) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("d:1", kDecode).ok());
  ASSERT_TRUE(pool.AddStatic("p:1", kPrefill).ok());
  pool.ReportStatus("p:1", kPrefill, Status(kPrefill, 3, 1, 42), t0_);
  const v1::ClusterStatusResponse snap = pool.Snapshot(t0_ + absl::Milliseconds(250));
  EXPECT_EQ(snap.model(), "smol");
  ASSERT_EQ(snap.nodes_size(), 2);
  EXPECT_EQ(snap.nodes(0).address(), "p:1");
  EXPECT_EQ(snap.nodes(0).role(), kPrefill);
  EXPECT_TRUE(snap.nodes(0).healthy());
  EXPECT_EQ(snap.nodes(0).status().load().free_blocks(), 42);
  EXPECT_EQ(snap.nodes(0).last_seen_ms_ago(), 250);
  EXPECT_EQ(snap.nodes(1).address(), "d:1");
  EXPECT_FALSE(snap.nodes(1).healthy());
  EXPECT_EQ(snap.nodes(1).last_seen_ms_ago(), -1);  // never polled
}

TEST_F(NodePoolTest, ADeadNodeShowsNoStaleLoad) {
  NodePool pool = MakePool();
  ASSERT_TRUE(pool.AddStatic("p:1", kPrefill).ok());
  pool.ReportStatus("p:1", kPrefill, Status(kPrefill, 3, 1, 42), t0_);
  ASSERT_TRUE(pool.Snapshot(t0_).nodes(0).status().has_load());
  pool.ReportFailure("p:1", kPrefill, absl::UnavailableError("connection refused"));
  v1::ClusterStatusResponse snap = pool.Snapshot(t0_ + absl::Seconds(1));
  ASSERT_EQ(snap.nodes_size(), 1);
  EXPECT_FALSE(snap.nodes(0).healthy());
  ASSERT_TRUE(snap.nodes(0).has_status());  // identity and layout from the last poll remain
  EXPECT_FALSE(snap.nodes(0).status().has_load()) << snap.nodes(0).status().DebugString();
  EXPECT_EQ(snap.nodes(0).last_seen_ms_ago(), 1000);
  EXPECT_THAT(snap.nodes(0).last_error(), testing::HasSubstr("connection refused"));
  // Back to health: the fresh poll's load is shown again.
  pool.ReportStatus("p:1", kPrefill, Status(kPrefill, 0, 0, 40), t0_ + absl::Seconds(2));
  snap = pool.Snapshot(t0_ + absl::Seconds(2));
  EXPECT_TRUE(snap.nodes(0).healthy());
  EXPECT_EQ(snap.nodes(0).status().load().free_blocks(), 40);
}

}  // namespace
}  // namespace tandem
