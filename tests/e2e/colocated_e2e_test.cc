// Colocated serving through real processes: decode nodes started with --colocated_prefill=true
// behind a router with --colocated=true prefill and decode each request on one instance (no
// prefill node, no KV transfer). The streamed tokens must equal the disaggregated cluster's and
// the single-process reference (greedy exactness); bad input gets the same precise codes,
// cancellation and deadlines free every block, a node dying mid-stream is resumed on another
// without duplicates, and a plain decode node refuses a prompt precisely.
#include <grpcpp/grpcpp.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<LocalCluster> StartOrDie(const ClusterSpec& spec) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(spec);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

void ExpectIdle(LocalCluster& c) {
  const absl::Status s = c.WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(s.ok()) << s << "\n" << c.LogTails();
}

// One colocated node per entry of `node_flags`, behind a --colocated router.
ClusterSpec ColocatedSpec(const std::string& model,
                          const std::vector<std::vector<std::string>>& node_flags) {
  ClusterSpec spec;
  spec.model_path = model;
  for (const auto& flags : node_flags) {
    NodeSpec node{{"--colocated_prefill=true"}};
    node.flags.insert(node.flags.end(), flags.begin(), flags.end());
    spec.decode.push_back(node);
  }
  spec.router_flags = {"--colocated=true", "--decode_policy=round_robin"};
  return spec;
}

std::vector<GenerateOutcome> GenerateAll(LocalCluster& c,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         int32_t tokens) {
  std::vector<GenerateOutcome> outs(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back(
        [&, i] { outs[i] = c.Generate(IdsRequest(prompts[i], tokens), absl::Seconds(120)); });
  }
  for (auto& t : threads) t.join();
  return outs;
}

TEST(ColocatedTest, TokensEqualTheDisaggregatedClusterAndTheReference) {
  const std::string model = SyntheticModelPath();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) prompts.push_back(RandomPrompt(1 + (i * 41) % 120, 300 + i));
  const int32_t kTokens = 12;
  const auto reference = ReferenceGreedy(model, prompts, kTokens);
  std::vector<GenerateOutcome> colocated;
  {
    // A chunked prefill (32 tokens a step) on one node, TP 2 × DCP 2 on the other.
    auto cluster =
        StartOrDie(ColocatedSpec(model, {{"--max_prefill_tokens=32"}, {"--tp=4", "--dcp=2"}}));
    ASSERT_NE(cluster, nullptr);
    colocated = GenerateAll(*cluster, prompts, kTokens);
    // max_tokens 1: the prefill's token alone, then a clean end.
    const GenerateOutcome one = cluster->Generate(IdsRequest(prompts[3], 1), absl::Seconds(60));
    ASSERT_TRUE(one.status.ok()) << one.status.error_message();
    EXPECT_EQ(one.tokens, std::vector<int32_t>{reference[3][0]});
    EXPECT_EQ(one.final.finish_reason(), "length");
    ExpectIdle(*cluster);
  }
  ClusterSpec disaggregated;
  disaggregated.model_path = model;
  disaggregated.prefill = {NodeSpec{}};
  disaggregated.decode = {NodeSpec{}};
  auto cluster = StartOrDie(disaggregated);
  ASSERT_NE(cluster, nullptr);
  const std::vector<GenerateOutcome> split = GenerateAll(*cluster, prompts, kTokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(colocated[i].status.ok()) << i << ": " << colocated[i].status.error_message();
    ASSERT_TRUE(split[i].status.ok()) << i << ": " << split[i].status.error_message();
    EXPECT_EQ(colocated[i].tokens, reference[i]) << "request " << i;
    EXPECT_EQ(colocated[i].tokens, split[i].tokens) << "request " << i;
    EXPECT_EQ(colocated[i].final.usage().completion_tokens(), kTokens) << "request " << i;
  }
  ExpectIdle(*cluster);
}

TEST(ColocatedTest, BadInputCancellationAndDeadlinesLeaveTheNodeIdle) {
  auto cluster = StartOrDie(ColocatedSpec(SyntheticModelPath(), {{"--max_prefill_tokens=16"}}));
  ASSERT_NE(cluster, nullptr);
  struct Case {
    const char* name;
    v1::GenerateRequest req;
    const char* message;
  };
  std::vector<Case> cases = {
      {"id beyond vocab", IdsRequest({5, 100000}, 4), "100000"},
      {"prompt beyond context", IdsRequest(RandomPrompt(2100, 1), 4), "context"},
      {"max_tokens beyond context", IdsRequest({5}, 5000), "context"},
      {"max_tokens 0", IdsRequest({5}, 0), "max_tokens"},
  };
  for (const Case& c : cases) {
    const GenerateOutcome out = cluster->Generate(c.req, absl::Seconds(30));
    EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.name << ": " << out.status.error_message();
    EXPECT_THAT(out.status.error_message(), HasSubstr(c.message)) << c.name;
    EXPECT_TRUE(out.tokens.empty()) << c.name;
  }
  // Straight to the node: a call may not carry both a prompt and a KV handle, nor a bad id.
  auto stub = v1::DecodeService::NewStub(
      grpc::CreateChannel(cluster->decode_addresses()[0], grpc::InsecureChannelCredentials()));
  auto call = [&](const v1::DecodeRequest& req, absl::Duration timeout, int* events) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    auto reader = stub->Decode(&ctx, req);
    v1::DecodeEvent ev;
    *events = 0;
    while (reader->Read(&ev)) ++*events;
    return reader->Finish();
  };
  v1::DecodeRequest both;
  both.set_request_id("both");
  both.add_prompt_ids(5);
  both.mutable_kv()->set_num_tokens(1);
  both.set_max_new_tokens(4);
  both.set_next_step(1);
  int events = 0;
  grpc::Status s = call(both, absl::Seconds(30), &events);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("either prompt_ids"));
  v1::DecodeRequest bad_id;
  bad_id.set_request_id("bad-id");
  bad_id.add_prompt_ids(-3);
  bad_id.set_max_new_tokens(4);
  bad_id.set_next_step(1);
  s = call(bad_id, absl::Seconds(30), &events);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(events, 0);
  // A deadline that ends the call during or right after a long chunked prefill (125 steps).
  v1::DecodeRequest slow;
  slow.set_request_id("slow");
  for (int32_t t : RandomPrompt(2000, 5)) slow.add_prompt_ids(t);
  slow.set_max_new_tokens(40);
  slow.set_next_step(1);
  s = call(slow, absl::Milliseconds(30), &events);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  ExpectIdle(*cluster);
  // The client cancels mid-stream.
  const GenerateOutcome out =
      cluster->Generate(IdsRequest(RandomPrompt(40, 9), 1500), absl::Seconds(60),
                        [](int32_t index, grpc::ClientContext& ctx) {
                          if (index == 3) ctx.TryCancel();
                        });
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED) << out.status.error_message();
  EXPECT_LT(out.tokens.size(), 1500u);
  ExpectIdle(*cluster);
  // The node keeps serving.
  const GenerateOutcome ok = cluster->Generate(IdsRequest({5, 6, 7}, 4), absl::Seconds(30));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.tokens.size(), 4u);
  ExpectIdle(*cluster);
}

TEST(ColocatedTest, NodeDyingMidStreamIsResumedOnAnotherWithoutDuplicates) {
  const std::string model = SyntheticModelPath();
  const std::vector<int32_t> prompt = RandomPrompt(25, 11);
  const int32_t kTokens = 600;
  const auto reference = ReferenceGreedy(model, {prompt}, kTokens);
  auto cluster = StartOrDie(ColocatedSpec(model, {{}, {"--tp=2"}}));
  ASSERT_NE(cluster, nullptr);
  bool killed = false;
  const GenerateOutcome out = cluster->Generate(
      IdsRequest(prompt, kTokens), absl::Seconds(120), [&](int32_t index, grpc::ClientContext&) {
        if (index != 5 || killed) return;
        absl::StatusOr<int> n = cluster->KillRunningDecodeNodes();
        ASSERT_TRUE(n.ok()) << n.status();
        killed = *n > 0;
      });
  ASSERT_TRUE(killed) << "no node was running the request at token 5";
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster->LogTails();
  EXPECT_GE(out.final.retries(), 1);
  ASSERT_EQ(out.indices.size(), static_cast<size_t>(kTokens));
  for (int32_t i = 0; i < kTokens; ++i) ASSERT_EQ(out.indices[i], i) << "duplicate or gap";
  EXPECT_EQ(out.tokens, reference[0]);
  ExpectIdle(*cluster);
}

TEST(ColocatedTest, APlainDecodeNodeRefusesAPromptPrecisely) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.decode = {NodeSpec{}};  // no --colocated_prefill
  spec.router_flags = {"--colocated=true"};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  const GenerateOutcome out = cluster->Generate(IdsRequest({5, 6, 7}, 4), absl::Seconds(30));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << out.status.error_message();
  EXPECT_THAT(out.status.error_message(), HasSubstr("--colocated_prefill=true"));
  ExpectIdle(*cluster);
}

}  // namespace
}  // namespace tandem::testing
