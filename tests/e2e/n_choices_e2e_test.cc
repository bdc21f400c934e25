// n > 1 from one prefill (docs/router.md#n-choices-from-one-prefill) through real processes with
// the real model (labels e2e + model) on a mismatched P/D layout, prefill tp 3 → decode tp 1:
// seeded sampling gives choice i exactly the tokens of an n = 1 request with seed + i, greedy
// choices are identical, the choices' tokens arrive interleaved, a cancellation mid-stream frees
// every block on every node, a decode node killed mid-answer leaves every choice resumed with its
// own tokens (nothing leaked, no free errors: the cluster's destructor checks those), and a
// --colocated router gives the same choices.
#include <algorithm>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"
#include "tests/model/format/model_env.h"

namespace tandem::testing {
namespace {

constexpr int32_t kTokens = 10;

ClusterSpec Spec(int decode_nodes) {
  ClusterSpec spec;
  spec.model_path = ModelPath();
  spec.prefill = {NodeSpec{{"--tp=3", "--kv_budget_mb=64"}}};
  for (int i = 0; i < decode_nodes; ++i) spec.decode.push_back(NodeSpec{{"--kv_budget_mb=64"}});
  return spec;
}

v1::GenerateRequest Request(int32_t n, float temperature, uint64_t seed, int32_t max_tokens) {
  v1::GenerateRequest req = IdsRequest(RandomPrompt(37, 3), max_tokens);
  req.set_n(n);
  req.mutable_sampling()->set_temperature(temperature);
  req.mutable_sampling()->set_seed(seed);
  return req;
}

void ExpectIdle(LocalCluster& cluster) {
  const absl::Status idle = cluster.WaitIdle(absl::Seconds(30));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << cluster.LogTails();
}

class NChoicesTest : public RealModelTest {
 protected:
  static void SetUpTestSuite() {
    if (ModelPath().empty()) return;
    absl::StatusOr<std::unique_ptr<LocalCluster>> c =
        LocalCluster::Start(Spec(1), absl::Minutes(4));
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    RealModelTest::SetUp();
    if (!IsSkipped()) {
      ASSERT_NE(cluster_, nullptr);
    }
  }
  inline static LocalCluster* cluster_ = nullptr;
};

TEST_F(NChoicesTest, SeededChoiceIIsTheOneChoiceRequestWithSeedPlusI) {
  const GenerateOutcome three =
      cluster_->Generate(Request(3, 1.0f, 4242, kTokens), absl::Minutes(3));
  ASSERT_TRUE(three.status.ok()) << three.status.error_message() << "\n" << cluster_->LogTails();
  ASSERT_EQ(three.choice_tokens.size(), 3u);
  ASSERT_EQ(three.choice_ends.size(), 3u);
  EXPECT_EQ(three.final.usage().completion_tokens(), 3 * kTokens);
  for (int32_t i = 0; i < 3; ++i) {
    const GenerateOutcome one =
        cluster_->Generate(Request(1, 1.0f, 4242 + i, kTokens), absl::Minutes(3));
    ASSERT_TRUE(one.status.ok()) << one.status.error_message();
    EXPECT_EQ(three.choice_tokens.at(i), one.tokens) << "choice " << i;
    EXPECT_EQ(three.choice_text.at(i), one.text) << "choice " << i;
    EXPECT_EQ(three.choice_ends.at(i).finish_reason(), "length");
    EXPECT_EQ(three.choice_ends.at(i).completion_tokens(), kTokens);
  }
  EXPECT_NE(three.choice_tokens.at(0), three.choice_tokens.at(1));
  // Streamed as the decode node interleaves them: choice 0 has tokens both before and after one
  // of choice 1's.
  const std::vector<int32_t>& order = three.choice_order;
  const auto first_1 = std::find(order.begin(), order.end(), 1);
  ASSERT_NE(first_1, order.end());
  EXPECT_NE(std::find(first_1, order.end(), 0), order.end());
  ExpectIdle(*cluster_);
}

TEST_F(NChoicesTest, GreedyChoicesAreIdentical) {
  const GenerateOutcome two = cluster_->Generate(Request(2, 0.0f, 0, kTokens), absl::Minutes(3));
  ASSERT_TRUE(two.status.ok()) << two.status.error_message() << "\n" << cluster_->LogTails();
  const auto reference = ReferenceGreedy(ModelPath(), {RandomPrompt(37, 3)}, kTokens);
  EXPECT_EQ(two.choice_tokens.at(0), reference[0]);
  EXPECT_EQ(two.choice_tokens.at(1), reference[0]);
  ExpectIdle(*cluster_);
}

TEST_F(NChoicesTest, CancellingMidStreamFreesEveryBlock) {
  int tokens = 0;
  const GenerateOutcome out = cluster_->Generate(Request(3, 1.0f, 7, 400), absl::Minutes(3),
                                                 [&](int32_t, grpc::ClientContext& ctx) {
                                                   if (++tokens == 8) ctx.TryCancel();
                                                 });
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED) << out.status.error_message();
  ExpectIdle(*cluster_);
  absl::StatusOr<std::vector<InstanceLoadView>> loads = cluster_->Loads();
  ASSERT_TRUE(loads.ok()) << loads.status();
  for (const InstanceLoadView& v : *loads) {
    EXPECT_EQ(v.load.free_blocks(), v.load.total_blocks()) << v.address;
    EXPECT_EQ(v.block_free_errors, 0) << v.address;
  }
}

// Resume (docs/router.md#n-choices-from-one-prefill): every unfinished choice is prefilled again
// with its tokens and decoded on its own, with its own seed, on the surviving decode node.
TEST_F(NChoicesTest, DecodeNodeDyingMidAnswerResumesEveryChoiceWithItsOwnTokens) {
  constexpr int32_t kLong = 40;
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(Spec(2), absl::Minutes(4));
  ASSERT_TRUE(c.ok()) << c.status();
  LocalCluster& cluster = **c;
  std::vector<std::vector<int32_t>> reference;
  for (int32_t i = 0; i < 3; ++i) {
    const GenerateOutcome one = cluster.Generate(Request(1, 0.8f, 99 + i, kLong), absl::Minutes(3));
    ASSERT_TRUE(one.status.ok()) << one.status.error_message();
    reference.push_back(one.tokens);
  }
  bool killed = false;
  const GenerateOutcome out = cluster.Generate(
      Request(3, 0.8f, 99, kLong), absl::Minutes(3), [&](int32_t index, grpc::ClientContext&) {
        if (index != 3 || killed) return;
        absl::StatusOr<int> n = cluster.KillRunningDecodeNodes();
        ASSERT_TRUE(n.ok()) << n.status();
        killed = *n > 0;
      });
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster.LogTails();
  EXPECT_TRUE(killed);
  EXPECT_GE(out.final.retries(), 1);
  for (int32_t i = 0; i < 3; ++i) EXPECT_EQ(out.choice_tokens.at(i), reference[i]) << i;
  ExpectIdle(cluster);
}

// A --colocated router has no prefill to share: it serves the choices one after another, each as
// a one-choice request with its own seed, so the tokens are the disaggregated cluster's.
TEST_F(NChoicesTest, ColocatedRouterServesEachChoiceWithItsOwnSeed) {
  ClusterSpec spec;
  spec.model_path = ModelPath();
  spec.decode = {NodeSpec{{"--colocated_prefill=true", "--kv_budget_mb=64"}}};
  spec.router_flags = {"--colocated=true"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(spec, absl::Minutes(4));
  ASSERT_TRUE(c.ok()) << c.status();
  const GenerateOutcome colocated =
      (*c)->Generate(Request(2, 1.0f, 4242, kTokens), absl::Minutes(3));
  ASSERT_TRUE(colocated.status.ok()) << colocated.status.error_message() << "\n"
                                     << (*c)->LogTails();
  const GenerateOutcome split =
      cluster_->Generate(Request(2, 1.0f, 4242, kTokens), absl::Minutes(3));
  ASSERT_TRUE(split.status.ok()) << split.status.error_message();
  EXPECT_EQ(colocated.choice_tokens, split.choice_tokens);
  EXPECT_EQ(colocated.final.usage().completion_tokens(), 2 * kTokens);
  ExpectIdle(**c);
}

}  // namespace
}  // namespace tandem::testing

int main(int argc, char** argv) { return tandem::testing::RunModelTests(argc, argv); }
