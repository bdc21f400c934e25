// Cluster behaviour through real processes: concurrency, bad input, incompatible pairs, KV
// capacity, cancellation, lease expiry and node failures. Every test ends with every instance
// idle: all blocks free, no leases.
#include <grpcpp/grpcpp.h>

#include <map>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/grammar/json_schema.h"
#include "nlohmann/json.hpp"
#include "router/http/openai_tools.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/metrics_scrape.h"
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

TEST(ClusterBehaviourTest, ThirtyTwoConcurrentStreamsThroughTwoByTwo) {
  const std::string model = SyntheticModelPath();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> lengths;
  for (int i = 0; i < 32; ++i) {
    prompts.push_back(RandomPrompt(1 + (i * 37) % 90, 100 + i));
  }
  const int32_t kTokens = 10;
  const auto reference = ReferenceGreedy(model, prompts, kTokens);
  ClusterSpec spec;
  spec.model_path = model;
  spec.prefill = {NodeSpec{{"--tp=2"}}, NodeSpec{{"--tp=1"}}};
  spec.decode = {NodeSpec{{"--tp=4", "--dcp=2"}}, NodeSpec{{"--tp=1"}}};
  spec.router_flags = {"--decode_policy=round_robin"};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  std::vector<GenerateOutcome> outs(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      outs[i] = cluster->Generate(IdsRequest(prompts[i], kTokens), absl::Seconds(120));
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, reference[i]) << "request " << i;
  }
  ExpectIdle(*cluster);
}

TEST(ClusterBehaviourTest, BadInputGetsPreciseCodesAndTheClusterKeepsServing) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{}};
  spec.decode = {NodeSpec{}};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  struct Case {
    const char* name;
    v1::GenerateRequest req;
    grpc::StatusCode code;
    const char* message;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, v1::GenerateRequest r, grpc::StatusCode code, const char* msg) {
    cases.push_back({name, std::move(r), code, msg});
  };
  v1::GenerateRequest r = IdsRequest({5, 6}, 4);
  r.set_text("");
  add("empty prompt", r, grpc::StatusCode::INVALID_ARGUMENT, "empty");
  add("id beyond vocab", IdsRequest({5, 100000}, 4), grpc::StatusCode::INVALID_ARGUMENT, "100000");
  add("prompt beyond context", IdsRequest(RandomPrompt(2100, 1), 4),
      grpc::StatusCode::INVALID_ARGUMENT, "context");
  add("max_tokens 0", IdsRequest({5}, 0), grpc::StatusCode::INVALID_ARGUMENT, "max_tokens");
  add("max_tokens beyond context", IdsRequest({5}, 5000), grpc::StatusCode::INVALID_ARGUMENT,
      "context");
  r = IdsRequest({5}, 4);
  r.mutable_sampling()->set_temperature(-1.f);
  add("negative temperature", r, grpc::StatusCode::INVALID_ARGUMENT, "temperature");
  r = IdsRequest({5}, 4);
  r.mutable_sampling()->set_top_p(1.5f);
  add("top_p above 1", r, grpc::StatusCode::INVALID_ARGUMENT, "top_p");
  r = IdsRequest({5}, 4);
  r.mutable_sampling()->set_top_k(-2);
  add("negative top_k", r, grpc::StatusCode::INVALID_ARGUMENT, "top_k");
  r = IdsRequest({5}, 4);
  r.set_model("no-such-model");
  add("unknown model", r, grpc::StatusCode::NOT_FOUND, "no-such-model");
  for (const Case& c : cases) {
    const GenerateOutcome out = cluster->Generate(c.req, absl::Seconds(30));
    EXPECT_EQ(out.status.error_code(), c.code) << c.name << ": " << out.status.error_message();
    EXPECT_THAT(out.status.error_message(), HasSubstr(c.message)) << c.name;
    EXPECT_TRUE(out.tokens.empty()) << c.name;
  }
  const GenerateOutcome ok = cluster->Generate(IdsRequest({5, 6, 7}, 4), absl::Seconds(30));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.tokens.size(), 4u);
  ExpectIdle(*cluster);
}

TEST(ClusterBehaviourTest, IncompatiblePairFailsAtHandshake) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath(7);
  spec.decode_model_path = SyntheticModelPath(8);  // same shapes, different weights
  spec.prefill = {NodeSpec{}};
  spec.decode = {NodeSpec{}};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  const GenerateOutcome out = cluster->Generate(IdsRequest({5, 6, 7}, 4), absl::Seconds(30));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << out.status.error_message();
  EXPECT_THAT(out.status.error_message(), HasSubstr("compatib"));
  ExpectIdle(*cluster);
}

TEST(ClusterBehaviourTest, KvCapacityShortPastQueueTimeoutIsResourceExhausted) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  // 4 KiB blocks of 16 tokens: 0.1 MiB holds 25 blocks = 400 tokens on each instance.
  spec.prefill = {NodeSpec{{"--kv_budget_mb=0.1", "--queue_timeout_ms=300"}}};
  spec.decode = {NodeSpec{{"--kv_budget_mb=0.1", "--queue_timeout_ms=300"}}};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  // Never fits on the decode instance: 20 + 500 positions need 33 blocks.
  GenerateOutcome out = cluster->Generate(IdsRequest(RandomPrompt(20, 2), 500), absl::Seconds(30));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << out.status.error_message();
  EXPECT_THAT(out.status.error_message(), HasSubstr("in total"));
  // Fits, but a KV lease holds 19 of the prefill's 25 blocks for longer than the queue timeout.
  auto prefill = v1::PrefillService::NewStub(
      grpc::CreateChannel(cluster->prefill_addresses()[0], grpc::InsecureChannelCredentials()));
  v1::PrefillRequest hold;
  hold.set_request_id("holder");
  for (int32_t t : RandomPrompt(300, 3)) hold.add_prompt_ids(t);
  hold.set_lease_ms(60000);
  v1::PrefillResponse held;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  ASSERT_TRUE(prefill->Prefill(&ctx, hold, &held).ok());
  out = cluster->Generate(IdsRequest(RandomPrompt(150, 4), 10), absl::Seconds(30));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << out.status.error_message();
  EXPECT_THAT(out.status.error_message(), HasSubstr("queue timeout"));
  v1::ReleaseKvRequest rel;
  rel.set_request_id("holder");
  rel.set_epoch(held.kv().epoch());
  rel.set_generation(held.kv().generation());
  v1::ReleaseKvResponse rel_resp;
  grpc::ClientContext rctx;
  ASSERT_TRUE(prefill->ReleaseKv(&rctx, rel, &rel_resp).ok());
  EXPECT_TRUE(rel_resp.lease_held());
  // Capacity is back: the same request now succeeds.
  out = cluster->Generate(IdsRequest(RandomPrompt(150, 4), 10), absl::Seconds(30));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  ExpectIdle(*cluster);
}

TEST(ClusterBehaviourTest, CancellationMidStreamFreesBlocksOnBothSides) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{"--tp=2"}}};
  spec.decode = {NodeSpec{{"--tp=4", "--dcp=2"}}};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  const GenerateOutcome out =
      cluster->Generate(IdsRequest(RandomPrompt(40, 9), 1500), absl::Seconds(60),
                        [](int32_t index, grpc::ClientContext& ctx) {
                          if (index == 3) ctx.TryCancel();
                        });
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED) << out.status.error_message();
  EXPECT_LT(out.tokens.size(), 1500u);
  ExpectIdle(*cluster);
}

TEST(ClusterBehaviourTest, ExpiredLeaseFreesKvAndAStaleHandleIsNeverServed) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{"--lease_ms=300"}}};
  spec.decode = {NodeSpec{}};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  auto prefill = v1::PrefillService::NewStub(
      grpc::CreateChannel(cluster->prefill_addresses()[0], grpc::InsecureChannelCredentials()));
  v1::PrefillRequest req;
  req.set_request_id("lease-test");
  for (int32_t t : RandomPrompt(30, 5)) req.add_prompt_ids(t);
  req.set_max_new_tokens(4);
  v1::PrefillResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  ASSERT_TRUE(prefill->Prefill(&ctx, req, &resp).ok());
  // Nobody releases it: the lease runs out and the prefill frees the blocks by itself.
  ExpectIdle(*cluster);
  // A decode handed the stale handle pulls, learns at ReleaseKv that the lease did not hold,
  // and refuses to serve the (possibly overwritten) KV.
  auto decode = v1::DecodeService::NewStub(
      grpc::CreateChannel(cluster->decode_addresses()[0], grpc::InsecureChannelCredentials()));
  v1::DecodeRequest dreq;
  dreq.set_request_id("lease-test");
  dreq.set_first_token(resp.first_token());
  *dreq.mutable_kv() = resp.kv();
  dreq.set_max_new_tokens(4);
  grpc::ClientContext dctx;
  dctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto reader = decode->Decode(&dctx, dreq);
  v1::DecodeEvent ev;
  int events = 0;
  while (reader->Read(&ev)) ++events;
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(events, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("lease"));
  // Releasing the stale generation reports the lease as lost.
  v1::ReleaseKvRequest rel;
  rel.set_request_id("lease-test");
  rel.set_epoch(resp.kv().epoch());
  rel.set_generation(resp.kv().generation());
  v1::ReleaseKvResponse rel_resp;
  grpc::ClientContext rctx;
  ASSERT_TRUE(prefill->ReleaseKv(&rctx, rel, &rel_resp).ok());
  EXPECT_FALSE(rel_resp.lease_held());
  ExpectIdle(*cluster);
}

TEST(ClusterBehaviourTest, DecodeNodeDyingMidStreamIsResumedWithoutDuplicates) {
  const std::string model = SyntheticModelPath();
  const std::vector<int32_t> prompt = RandomPrompt(25, 11);
  const int32_t kTokens = 600;
  const auto reference = ReferenceGreedy(model, {prompt}, kTokens);
  ClusterSpec spec;
  spec.model_path = model;
  spec.prefill = {NodeSpec{}};
  spec.decode = {NodeSpec{}, NodeSpec{{"--tp=2"}}};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  bool killed = false;
  const GenerateOutcome out = cluster->Generate(
      IdsRequest(prompt, kTokens), absl::Seconds(120), [&](int32_t index, grpc::ClientContext&) {
        if (index != 5 || killed) return;
        absl::StatusOr<int> n = cluster->KillRunningDecodeNodes();
        ASSERT_TRUE(n.ok()) << n.status();
        killed = *n > 0;
      });
  ASSERT_TRUE(killed) << "no decode node was running the request at token 5";
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster->LogTails();
  EXPECT_GE(out.final.retries(), 1);
  ASSERT_EQ(out.indices.size(), static_cast<size_t>(kTokens));
  for (int32_t i = 0; i < kTokens; ++i) ASSERT_EQ(out.indices[i], i) << "duplicate or gap";
  EXPECT_EQ(out.tokens, reference[0]);
  ExpectIdle(*cluster);
}

// Grammar-constrained decoding (issue 25) through a mismatched P/D layout (prefill tp 2, decode
// tp 1 and 2) with the decode node killed mid-answer: the resumed decode replays the matcher over
// the streamed tokens, so the output is the uninterrupted run's, token for token, and parses as
// JSON valid against the schema.
TEST(ClusterBehaviourTest, GrammarOutputSurvivesADecodeNodeDyingMidStream) {
  const std::string schema = R"({"type": "object", "properties": {"ids": {"type": "array",
      "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 12,
      "maxItems": 14}, "ok": {"type": "boolean"}}, "required": ["ids", "ok"],
      "additionalProperties": false})";
  absl::StatusOr<std::string> grammar = JsonSchemaTextToGbnf(schema);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{"--tp=2"}}};
  spec.decode = {NodeSpec{}, NodeSpec{{"--tp=2"}}};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  v1::GenerateRequest request = IdsRequest(RandomPrompt(20, 5), 400);
  request.mutable_sampling()->set_grammar(*grammar);
  bool killed = false;
  const GenerateOutcome out =
      cluster->Generate(request, absl::Seconds(120), [&](int32_t index, grpc::ClientContext&) {
        if (index != 5 || killed) return;
        absl::StatusOr<int> n = cluster->KillRunningDecodeNodes();
        ASSERT_TRUE(n.ok()) << n.status();
        killed = *n > 0;
      });
  ASSERT_TRUE(killed) << "no decode node was running the request at token 5";
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster->LogTails();
  EXPECT_GE(out.final.retries(), 1);
  EXPECT_EQ(out.final.finish_reason(), "stop");
  const nlohmann::json value = nlohmann::json::parse(out.text, nullptr, false);
  ASSERT_FALSE(value.is_discarded()) << out.text;
  ASSERT_TRUE(value.is_object() && value.size() == 2 && value["ok"].is_boolean()) << out.text;
  ASSERT_TRUE(value["ids"].is_array()) << out.text;
  EXPECT_GE(value["ids"].size(), 12u);
  EXPECT_LE(value["ids"].size(), 14u);
  for (const auto& id : value["ids"]) {
    EXPECT_TRUE(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= 999)
        << out.text;
  }
  // The same request on the surviving node, uninterrupted: the same tokens (greedy).
  const GenerateOutcome again = cluster->Generate(request, absl::Seconds(120));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.tokens, out.tokens);
  // A grammar the nodes cannot parse is the client's error, before any prefill.
  v1::GenerateRequest bad = IdsRequest(RandomPrompt(20, 5), 4);
  bad.mutable_sampling()->set_grammar("root ::= (");
  const GenerateOutcome refused = cluster->Generate(bad, absl::Seconds(30));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("sampling.grammar: gbnf: line 1"));
  ExpectIdle(*cluster);
}

// A forced tool call (issue 25 item 5) through a mismatched P/D layout (prefill tp 2, decode tp 1
// and 2) with the decode node killed mid-answer: the router's tools parsing builds the call's
// grammar (tool_choice naming the function, the Hermes format), the resumed decode replays the
// matcher, and the output parses as one Hermes call whose arguments validate against the
// function's parameters — the same call, token for token, as an uninterrupted run.
TEST(ClusterBehaviourTest, ForcedToolCallSurvivesADecodeNodeDyingMidStream) {
  const std::string body = R"({"tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"days": {"type": "array", "items":
      {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 6, "maxItems": 8}, "unit":
      {"enum": ["celsius", "fahrenheit"]}}, "required": ["days", "unit"],
      "additionalProperties": false}}}, {"type": "function", "function": {"name": "get_time"}}],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})";
  absl::StatusOr<std::optional<OpenAiTools>> tools =
      ParseOpenAiTools(nlohmann::json::parse(body), body);
  ASSERT_TRUE(tools.ok()) << tools.status();
  ASSERT_TRUE(tools->has_value());
  absl::StatusOr<std::string> grammar = ToolCallGrammar(**tools, ToolCallFormat::kHermes);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{"--tp=2"}}};
  spec.decode = {NodeSpec{}, NodeSpec{{"--tp=2"}}};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  v1::GenerateRequest request = IdsRequest(RandomPrompt(20, 9), 400);
  request.mutable_sampling()->set_grammar(*grammar);
  bool killed = false;
  const GenerateOutcome out =
      cluster->Generate(request, absl::Seconds(120), [&](int32_t index, grpc::ClientContext&) {
        if (index != 5 || killed) return;
        absl::StatusOr<int> n = cluster->KillRunningDecodeNodes();
        ASSERT_TRUE(n.ok()) << n.status();
        killed = *n > 0;
      });
  ASSERT_TRUE(killed) << "no decode node was running the request at token 5";
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster->LogTails();
  EXPECT_GE(out.final.retries(), 1);
  EXPECT_EQ(out.final.finish_reason(), "stop");
  const ParsedToolOutput parsed = ParseToolCalls(out.text, ToolCallFormat::kHermes);
  ASSERT_EQ(parsed.calls.size(), 1u) << out.text;
  EXPECT_EQ(parsed.content, "") << out.text;
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  const nlohmann::json args = nlohmann::json::parse(parsed.calls[0].arguments, nullptr, false);
  ASSERT_TRUE(args.is_object() && args.size() == 2) << out.text;
  ASSERT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << out.text;
  ASSERT_TRUE(args["days"].is_array()) << out.text;
  EXPECT_GE(args["days"].size(), 6u);
  EXPECT_LE(args["days"].size(), 8u);
  for (const auto& d : args["days"]) {
    EXPECT_TRUE(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= 99)
        << out.text;
  }
  // The same request on the surviving node, uninterrupted: the same call (greedy).
  const GenerateOutcome again = cluster->Generate(request, absl::Seconds(120));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.tokens, out.tokens);
  EXPECT_EQ(again.text, out.text);
  ExpectIdle(*cluster);
}

TEST(ClusterBehaviourTest, DeadPrefillNodeCostsARetryNotTheRequest) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{}, NodeSpec{}};
  spec.decode = {NodeSpec{}};
  spec.router_flags = {"--prefill_policy=round_robin", "--health_interval_ms=60000"};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  cluster->Kill("prefill", 0);  // the router has not noticed (health polls are a minute apart)
  for (int i = 0; i < 4; ++i) {
    const GenerateOutcome out =
        cluster->Generate(IdsRequest(RandomPrompt(12, 20 + i), 5), absl::Seconds(30));
    EXPECT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_EQ(out.tokens.size(), 5u);
  }
  ExpectIdle(*cluster);
}

// Provable KV (issue 28), through real processes and the UCX transport: the prefill node flips
// a byte of the first prompt's KV after computing its digests (test-only hook
// --testing_flip_kv_byte). The decode node's check fails that transfer (counted, logged, the KV
// discarded), the router prefills again, and the client gets exactly the reference tokens — on
// the plain path and the pipelined one (digests with the final progress message).
TEST(ClusterBehaviourTest, KvByteFlippedAfterItsDigestsIsCaughtAndTheRetryIsRight) {
  const std::string model = SyntheticModelPath();
  const std::vector<int32_t> prompt = RandomPrompt(45, 77);  // the last block is partial
  const auto reference = ReferenceGreedy(model, {prompt}, 6);
  for (const bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "plain");
    ClusterSpec spec;
    spec.model_path = model;
    spec.prefill = {NodeSpec{{"--tp=2", "--testing_flip_kv_byte=1"}}};
    spec.decode = {NodeSpec{{"--tp=1", "--block_size=8"}}};
    if (pipelined) spec.router_flags = {"--pipelined_transfer=true"};
    auto cluster = StartOrDie(spec);
    ASSERT_NE(cluster, nullptr);
    const GenerateOutcome out = cluster->Generate(IdsRequest(prompt, 6), absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster->LogTails();
    EXPECT_EQ(out.tokens, reference[0]);
    EXPECT_GE(out.final.retries(), 1);
    EXPECT_THAT(cluster->Log("prefill", 0), HasSubstr("testing_flip_kv_byte: flipped"));
    EXPECT_THAT(cluster->Log("decode", 0), HasSubstr("KV digest mismatch request_id="));
    absl::StatusOr<std::string> url = MetricsUrlInLog(cluster->Log("decode", 0));
    ASSERT_TRUE(url.ok()) << url.status();
    absl::StatusOr<std::map<std::string, double>> m = ScrapeMetrics(*url);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)["tandem_kv_digest_mismatches_total"], 1);
    EXPECT_EQ((*m)["tandem_kv_digests_verified_total"], 1);
    ExpectIdle(*cluster);
  }
}

}  // namespace
}  // namespace tandem::testing
