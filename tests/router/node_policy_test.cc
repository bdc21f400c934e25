#include "router/node_policy.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
  EXPECT_EQ(bad.status().message(),
            "unknown node selection policy 'random' (valid: round_robin, least_loaded)");
  EXPECT_EQ(PolicyKindName(PolicyKind::kLeastLoaded), "least_loaded");
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

}  // namespace
}  // namespace tandem
