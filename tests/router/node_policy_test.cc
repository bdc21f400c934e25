#include "router/node_policy.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/router_options.h"

namespace tandem {
namespace {

NodeCandidate Node(std::string address, int running, int queued, int free_blocks,
                   int inflight = 0) {
  return {std::move(address), running, queued, free_blocks, inflight};
}

TEST(ParsePolicyKindTest, KnownNamesAndExactError) {
  EXPECT_EQ(*ParsePolicyKind("round_robin"), PolicyKind::kRoundRobin);
  EXPECT_EQ(*ParsePolicyKind("least_loaded"), PolicyKind::kLeastLoaded);
  const absl::StatusOr<PolicyKind> bad = ParsePolicyKind("random");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParsePolicyKind("kv_aware"), PolicyKind::kKvAware);
  EXPECT_EQ(bad.status().message(),
            "unknown node selection policy 'random' (valid: round_robin, least_loaded, kv_aware)");
  EXPECT_EQ(PolicyKindName(PolicyKind::kLeastLoaded), "least_loaded");
  EXPECT_EQ(PolicyKindName(PolicyKind::kKvAware), "kv_aware");
}

TEST(NodeSelectorTest, EmptyFleetHasNoPick) {
  NodeSelector rr(PolicyKind::kRoundRobin);
  NodeSelector ll(PolicyKind::kLeastLoaded);
  EXPECT_EQ(rr.Pick({}), std::nullopt);
  EXPECT_EQ(ll.Pick({}), std::nullopt);
}

TEST(NodeSelectorTest, RoundRobinCyclesInOrder) {
  NodeSelector rr(PolicyKind::kRoundRobin);
  const std::vector<NodeCandidate> nodes = {Node("a", 9, 9, 0), Node("b", 0, 0, 100),
                                            Node("c", 5, 0, 10)};
  std::vector<size_t> picks;
  for (int i = 0; i < 7; ++i) picks.push_back(*rr.Pick(nodes));
  EXPECT_THAT(picks, testing::ElementsAre(0, 1, 2, 0, 1, 2, 0));  // load is ignored
}

TEST(NodeSelectorTest, RoundRobinSkipsExcludedNodes) {
  NodeSelector rr(PolicyKind::kRoundRobin);
  const std::vector<NodeCandidate> nodes = {Node("a", 0, 0, 0), Node("b", 0, 0, 0),
                                            Node("c", 0, 0, 0)};
  for (int i = 0; i < 6; ++i) EXPECT_NE(*rr.Pick(nodes, {"b"}), 1u);
}

TEST(NodeSelectorTest, LeastLoadedPrefersShortestQueueThenMostFreeBlocks) {
  NodeSelector ll(PolicyKind::kLeastLoaded);
  // Depth = running + queued: a=4, b=3, c=3, d=5. b and c tie on depth; c has more free blocks.
  const std::vector<NodeCandidate> nodes = {Node("a", 4, 0, 1000), Node("b", 1, 2, 10),
                                            Node("c", 3, 0, 20), Node("d", 0, 5, 5000)};
  EXPECT_EQ(*ll.Pick(nodes), 2u);
  // Repeating gives the same answer: the choice depends only on the inputs.
  EXPECT_EQ(*ll.Pick(nodes), 2u);
}

TEST(NodeSelectorTest, LeastLoadedTieBreaksOnInflightThenAddress) {
  NodeSelector ll(PolicyKind::kLeastLoaded);
  const std::vector<NodeCandidate> tied = {Node("z", 1, 0, 10, 0), Node("m", 1, 0, 10, 0),
                                           Node("q", 1, 0, 10, 0)};
  EXPECT_EQ(*ll.Pick(tied), 1u);  // smallest address "m"
  const std::vector<NodeCandidate> busy = {Node("z", 1, 0, 10, 0), Node("m", 1, 0, 10, 2),
                                           Node("q", 1, 0, 10, 1)};
  EXPECT_EQ(*ll.Pick(busy), 0u);  // fewest router calls in flight
}

TEST(NodeSelectorTest, LeastLoadedAvoidsExcludedUnlessAllAre) {
  NodeSelector ll(PolicyKind::kLeastLoaded);
  const std::vector<NodeCandidate> nodes = {Node("a", 0, 0, 100), Node("b", 3, 0, 1)};
  EXPECT_EQ(*ll.Pick(nodes, {"a"}), 1u);
  // Everything excluded: the excluded nodes are eligible again, best first.
  EXPECT_EQ(*ll.Pick(nodes, {"a", "b"}), 0u);
}

// A prefill candidate as kv_aware sees it: `cached` leading prompt tokens held, `pending` prompt
// tokens queued or running there.
NodeCandidate Kv(std::string address, int64_t cached, int64_t pending, int running = 0,
                 int free_blocks = 100) {
  NodeCandidate c = Node(std::move(address), running, 0, free_blocks);
  c.has_prefix_digest = true;
  c.cached_prefix_tokens = cached;
  c.pending_prompt_tokens = pending;
  return c;
}

TEST(EstimatedPrefillWorkTest, UncachedPlusPendingNeverNegative) {
  EXPECT_EQ(EstimatedPrefillWork(Kv("a", 0, 0), 2000), 2000);
  EXPECT_EQ(EstimatedPrefillWork(Kv("a", 1984, 0), 2000), 16);
  EXPECT_EQ(EstimatedPrefillWork(Kv("a", 1984, 500), 2000), 516);
  EXPECT_EQ(EstimatedPrefillWork(Kv("a", 2048, 0), 2000), 0);  // a stale digest claiming more
  EXPECT_EQ(EstimatedPrefillWork(Kv("a", 0, -5), 10), 10);     // nonsense load counts as none
}

TEST(NodeSelectorTest, KvAwarePrefersTheNodeHoldingThePrefix) {
  NodeSelector kv(PolicyKind::kKvAware);
  // b holds 1984 of 2000 tokens although least_loaded would take a (idle, more free blocks).
  const std::vector<NodeCandidate> nodes = {Kv("a", 0, 0, 0, 900), Kv("b", 1984, 0, 1, 10),
                                            Kv("c", 512, 0, 0, 900)};
  EXPECT_EQ(*kv.Pick(nodes, {}, 2000), 1u);
}

TEST(NodeSelectorTest, KvAwareLoadOutweighsASmallCachedPrefix) {
  NodeSelector kv(PolicyKind::kKvAware);
  // a holds one 16-token block but has 1000 prompt tokens to compute first: 984 + 1000 > 1000.
  EXPECT_EQ(*kv.Pick({Kv("a", 16, 1000), Kv("b", 0, 0)}, {}, 1000), 1u);
  // With a little load the cached block still wins: 984 + 10 < 1000.
  EXPECT_EQ(*kv.Pick({Kv("a", 16, 10), Kv("b", 0, 0)}, {}, 1000), 0u);
  // A long cached prefix outweighs the same load: 200 + 1000 < 2000 + 0.
  EXPECT_EQ(*kv.Pick({Kv("a", 1800, 1000), Kv("b", 0, 0)}, {}, 2000), 0u);
}

TEST(NodeSelectorTest, KvAwareTiesBreakAsLeastLoaded) {
  NodeSelector kv(PolicyKind::kKvAware);
  // Equal work (nothing cached, nothing pending): least_loaded's order decides.
  const std::vector<NodeCandidate> tied = {Kv("z", 0, 0, 2), Kv("m", 0, 0, 1, 10),
                                           Kv("q", 0, 0, 1, 50)};
  EXPECT_EQ(*kv.Pick(tied, {}, 300), 2u);  // depth 1, then most free blocks
  // Same work by different means (a: 100 uncached + 0 pending, b: 0 uncached + 100 pending).
  EXPECT_EQ(*kv.Pick({Kv("b", 100, 100, 3), Kv("a", 0, 0, 1)}, {}, 100), 1u);
}

TEST(NodeSelectorTest, KvAwareWithoutDigestsIsLeastLoaded) {
  NodeSelector kv(PolicyKind::kKvAware);
  NodeSelector ll(PolicyKind::kLeastLoaded);
  std::vector<NodeCandidate> nodes = {Node("a", 4, 0, 1000), Node("b", 1, 2, 10),
                                      Node("c", 3, 0, 20), Node("d", 0, 5, 5000)};
  // Pending tokens without any digest do not change the least_loaded choice either.
  nodes[2].pending_prompt_tokens = 100000;
  EXPECT_EQ(*kv.Pick(nodes, {}, 500), *ll.Pick(nodes));
  EXPECT_EQ(*kv.Pick(nodes, {}, 500), 2u);
  // One node with a digest switches to scoring (c's pending work now counts against it).
  nodes[0].has_prefix_digest = true;
  EXPECT_EQ(*kv.Pick(nodes, {}, 500), 1u);  // a, b, d: 500 each; b is least loaded of those
}

TEST(NodeSelectorTest, KvAwareAvoidsExcludedNodesEvenWithTheirPrefix) {
  NodeSelector kv(PolicyKind::kKvAware);
  const std::vector<NodeCandidate> nodes = {Kv("a", 1024, 0), Kv("b", 0, 0)};
  EXPECT_EQ(*kv.Pick(nodes, {"a"}, 1100), 1u);
  EXPECT_EQ(*kv.Pick(nodes, {"a", "b"}, 1100), 0u);
}

TEST(RouterOptionsTest, KvAwareIsThePrefillDefaultAndRejectedForDecode) {
  RouterOptions options;
  EXPECT_EQ(options.prefill_policy, PolicyKind::kKvAware);
  EXPECT_EQ(options.decode_policy, PolicyKind::kLeastLoaded);
  EXPECT_TRUE(ValidateRouterOptions(options).ok());
  options.decode_policy = PolicyKind::kKvAware;
  const absl::Status s = ValidateRouterOptions(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "decode_policy kv_aware: decode nodes keep no prefix cache (use round_robin or "
            "least_loaded)");
}

TEST(RouterOptionsTest, ColocatedRefusesPrefillNodes) {
  RouterOptions options;
  options.colocated = true;
  options.decode_nodes = {"d:1"};
  EXPECT_TRUE(ValidateRouterOptions(options).ok());
  options.prefill_nodes = {"p:1"};
  const absl::Status s = ValidateRouterOptions(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "colocated: decode nodes prefill prompts themselves, so no prefill nodes may be listed "
            "(drop --prefill)");
}

TEST(RouterOptionsTest, PipelinedTransferIsOffByDefaultAndRefusedWhenColocated) {
  RouterOptions options;
  EXPECT_FALSE(options.pipelined_transfer);
  options.pipelined_transfer = true;
  options.prefill_nodes = {"p:1"};
  EXPECT_TRUE(ValidateRouterOptions(options).ok());
  options.prefill_nodes.clear();
  options.colocated = true;
  const absl::Status s = ValidateRouterOptions(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "pipelined_transfer: colocated serving moves no KV between nodes (drop one of "
            "--colocated, --pipelined_transfer)");
}

}  // namespace
}  // namespace tandem
