// The router against fake nodes (fixture: router_integration_fixture.h), cluster side: node
// availability and health, cluster status, heartbeats and expiry, metrics, where blame goes.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/router/router_integration_fixture.h"

namespace tandem::testing_router {
namespace {

TEST_F(RouterIntegrationTest, NoHealthyDecodeNodeIsUnavailableAndTheKvIsReleased) {
  FakePrefill prefill("p0", prefill_script_);
  // Port 1 on loopback: nothing listens there, so every poll fails.
  StartRouter({&prefill}, {}, {"127.0.0.1:1"});
  ASSERT_TRUE(WaitForCluster([](const v1::ClusterStatusResponse& c) {
    return c.nodes_size() == 2 && c.nodes(0).healthy() && !c.nodes(1).last_error().empty();
  }));
  const absl::Time start = absl::Now();
  const Reply reply = Generate(TextRequest("hi", 4));
  EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  // It waited its budget for a decode node to become healthy, then gave up saying so.
  EXPECT_THAT(reply.status.error_message(),
              testing::MatchesRegex("no healthy decode node \\(1 known, none healthy\\); waited "
                                    "[0-9]+ ms for one to become healthy"));
  EXPECT_GE(absl::Now() - start, wait_budget_);
  ASSERT_EQ(reply.tokens.size(), 1u);  // the first token was already streamed
  ASSERT_TRUE(prefill.WaitForReleases(1, kWait));
  EXPECT_EQ(prefill.releases()[0].generation(), prefill.handles()[0].generation());
}

TEST_F(RouterIntegrationTest, NoHealthyPrefillNodeIsUnavailable) {
  FakeDecode decode("d0", decode_script_);
  StartRouter({}, {&decode});
  const Reply reply = Generate(TextRequest("hi", 4));
  EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(reply.status.error_message(),
              testing::StartsWith("no healthy prefill node (0 known, none healthy); waited "));
}

// Issue 19: a request that finds no healthy decode node waits (within its deadline and the
// wait budget) for one to become healthy and then completes, instead of failing at once.
TEST_F(RouterIntegrationTest, RequestWaitsForADecodeNodeToBecomeHealthyThenCompletes) {
  wait_budget_ = kWait;
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {});
  ASSERT_TRUE(WaitAllHealthy(1));
  Reply reply;
  std::thread client([&] { reply = Generate(TextRequest("hi", 4)); });
  // The request is past prefill and waiting for a decode node: now one registers.
  const absl::Time deadline = absl::Now() + kWait;
  while (prefill.prefills().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling an observed condition
  }
  ASSERT_EQ(prefill.prefills().size(), 1u);
  v1::HeartbeatRequest hb;
  hb.set_address(decode.address());
  hb.set_role(v1::INSTANCE_ROLE_DECODE);
  hb.set_ttl_ms(60000);
  v1::HeartbeatResponse ignored;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Heartbeat(&ctx, hb, &ignored).ok());
  client.join();
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(Ids(reply.tokens), Expected(4));
  EXPECT_EQ(decode.requests().size(), 1u);
  bool waited = false;
  for (const std::string& line : Log()) {
    waited |= absl::StrContains(line, "ms for a healthy decode node");
  }
  EXPECT_TRUE(waited);
}

TEST_F(RouterIntegrationTest, ClusterStatusListsEveryNodeWithItsStatus) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));
  const v1::ClusterStatusResponse c = Cluster();
  EXPECT_EQ(c.model(), kTestModelName);
  ASSERT_EQ(c.nodes_size(), 2);
  EXPECT_EQ(c.nodes(0).address(), prefill.address());
  EXPECT_EQ(c.nodes(0).role(), v1::INSTANCE_ROLE_PREFILL);
  EXPECT_EQ(c.nodes(0).source(), "static");
  EXPECT_EQ(c.nodes(0).status().engine_id(), "p0");
  EXPECT_EQ(c.nodes(0).status().load().total_blocks(), 128);
  EXPECT_GE(c.nodes(0).last_seen_ms_ago(), 0);
  EXPECT_EQ(c.nodes(1).address(), decode.address());
  EXPECT_EQ(c.nodes(1).role(), v1::INSTANCE_ROLE_DECODE);
  EXPECT_EQ(c.nodes(1).status().engine_id(), "d0");
  EXPECT_THAT(Log(),
              testing::Contains(absl::StrCat("decode node ", decode.address(), " is healthy")));
}

TEST_F(RouterIntegrationTest, HeartbeatRegistersANodeAndExpiryRemovesIt) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {});

  grpc::ClientContext bad_ctx;
  v1::HeartbeatRequest bad;
  bad.set_address(decode.address());
  bad.set_role(v1::INSTANCE_ROLE_DECODE);
  v1::HeartbeatResponse ignored;
  const grpc::Status bad_status = stub_->Heartbeat(&bad_ctx, bad, &ignored);
  EXPECT_EQ(bad_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad_status.error_message(), "heartbeat ttl must be > 0 ms (got 0)");

  v1::HeartbeatRequest hb = bad;
  hb.set_ttl_ms(1500);  // long enough to be polled and used, even under sanitizers
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Heartbeat(&ctx, hb, &ignored).ok());
  // Registered, polled at once, and usable for requests.
  ASSERT_TRUE(WaitAllHealthy(2));
  EXPECT_EQ(Cluster().nodes(1).source(), "heartbeat");
  const Reply reply = Generate(TextRequest("hi", 3));
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(decode.requests().size(), 1u);
  // No more heartbeats: the node is dropped after its ttl.
  ASSERT_TRUE(
      WaitForCluster([](const v1::ClusterStatusResponse& c) { return c.nodes_size() == 1; }));
  EXPECT_EQ(Cluster().nodes(0).role(), v1::INSTANCE_ROLE_PREFILL);
}

TEST_F(RouterIntegrationTest, ServesTheStandardHealthService) {
  StartRouter({}, {});
  // grpc.health.v1.Health/Check with an empty HealthCheckRequest; the reply is
  // HealthCheckResponse{status: SERVING (1)}, i.e. the bytes 08 01.
  grpc::GenericStub generic(channel_);
  grpc::Slice empty("");
  UnaryCall<grpc::ByteBuffer, grpc::ByteBuffer> call(grpc::ByteBuffer(&empty, 1),
                                                     absl::Now() + kWait);
  call.Start([&generic](auto* ctx, auto* req, auto* resp, auto done) {
    generic.UnaryCall(ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), req, resp,
                      std::move(done));
  });
  absl::StatusOr<grpc::ByteBuffer> reply = call.Wait();
  ASSERT_TRUE(reply.ok()) << reply.status();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply->Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

// The router's /metrics registry counts what its clients saw: successes by finish reason, time
// to first token and inter-token gaps, a prefill retried and a decode resumed, failures by code,
// nothing left running; and every node call carries the request id as x-request-id metadata.
TEST_F(RouterIntegrationTest, MetricsCountRequestsRecoveriesAndFailuresAndNodesGetTheRequestId) {
  FakePrefill p0("p0", prefill_script_);
  FakePrefill p1("p1", prefill_script_);
  FakeDecode d0("d0", decode_script_);
  FakeDecode d1("d1", decode_script_);
  StartRouter({&p0, &p1}, {&d0, &d1});
  ASSERT_TRUE(WaitAllHealthy(4));
  const std::string before = RenderPrometheusText(router_->metrics());
  EXPECT_THAT(before, HasSubstr("tandem_request_success_total{finish_reason=\"length\"} 0\n"));
  EXPECT_THAT(before, HasSubstr("tandem_time_to_first_token_seconds_count 0\n"));
  {
    absl::MutexLock lock(&prefill_script_->mu);
    prefill_script_->failures.push_back(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "prefill node going away"));
  }
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back(DecodeBehaviour{.die_after = 2});
  }
  v1::GenerateRequest request = TextRequest("hi", 6);
  request.set_request_id("metrics-1");
  const Reply reply = Generate(request);
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  ASSERT_EQ(reply.tokens.size(), 6u);
  ASSERT_TRUE(reply.final.has_value());
  EXPECT_EQ(reply.final->retries(), 2);  // one prefill retry + one decode resume

  v1::GenerateRequest bad = TextRequest("hi", 0);  // max_tokens 0: INVALID_ARGUMENT
  EXPECT_EQ(Generate(bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  const std::string text = RenderPrometheusText(router_->metrics());
  EXPECT_THAT(text, HasSubstr("tandem_request_success_total{finish_reason=\"length\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_request_success_total{finish_reason=\"stop\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("tandem_request_failure_total{code=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_time_to_first_token_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_inter_token_latency_seconds_count 5\n"));  // 6 tokens
  EXPECT_THAT(text, HasSubstr("tandem_e2e_request_latency_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_prefill_retries_total 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_decode_resumes_total 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_num_requests_running 0\n"));

  // Three prefill calls (failed, first, resume) and two decode calls, all tagged metrics-1.
  std::vector<std::string> ids = p0.prefill_request_ids();
  for (const std::string& id : p1.prefill_request_ids()) ids.push_back(id);
  for (const std::string& id : d0.request_ids()) ids.push_back(id);
  for (const std::string& id : d1.request_ids()) ids.push_back(id);
  EXPECT_THAT(ids, ElementsAre("metrics-1", "metrics-1", "metrics-1", "metrics-1", "metrics-1"))
      << "prefill calls: " << p0.prefills().size() << "+" << p1.prefills().size();

  // The log line carries the same id and the recoveries.
  EXPECT_THAT(Log(), testing::Contains(AllOf(HasSubstr("request request_id=metrics-1 outcome=OK"),
                                             HasSubstr(" retries=2 resumes=1"))));
}

// The next Decode call ends UNAVAILABLE with `message` before its first token, carrying the
// request's prefill node as its KV source when `blame_source`.
void DiesAtOnce(DecodeScript& script, const std::string& message, bool blame_source) {
  DecodeBehaviour dies;
  dies.die_after = 0;
  dies.die_message = message;
  dies.blame_source = blame_source;
  absl::MutexLock lock(&script.mu);
  script.calls.push_back(dies);
}

// Blame as data, end to end (issue 27 item 3): a decode failure carrying a KvSourceFailure
// (common/kv_source_failure.h) crosses real gRPC, and the retry avoids the prefill node it names —
// whatever the message says.
TEST_F(RouterIntegrationTest, TheAttachedKvSourceIsBlamedWhateverTheMessage) {
  for (const char* message :
       {"get from source rank 0 of engine 'p' epoch 1: failed: Endpoint timeout",
        "the KV source went away", ""}) {
    SCOPED_TRACE(message);
    auto prefill_script = std::make_shared<PrefillScript>();
    auto decode_script = std::make_shared<DecodeScript>();
    FakePrefill p0("p0", prefill_script);
    FakePrefill p1("p1", prefill_script);
    FakeDecode d0("d0", decode_script);
    FakeDecode d1("d1", decode_script);
    StartRouter({&p0, &p1}, {&d0, &d1});
    ASSERT_TRUE(WaitAllHealthy(4));
    DiesAtOnce(*decode_script, message, /*blame_source=*/true);
    const Reply reply = Generate(TextRequest("hello", 4));
    ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
    EXPECT_EQ(Ids(reply.tokens), Expected(4));
    // The first prefill's node was blamed: the resumed prefill ran on the other one.
    EXPECT_EQ(p0.prefills().size(), 1u);
    EXPECT_EQ(p1.prefills().size(), 1u);
    router_->Shutdown(absl::Seconds(2));
    router_.reset();
  }
}

// The old substring rule blamed the prefill node this message names; without the data the decode
// node that sent it is blamed, and the second decode call goes to the other decode node.
TEST_F(RouterIntegrationTest, AMessageNamingThePrefillWithoutTheDataBlamesTheDecodeNode) {
  FakePrefill p0("p0", prefill_script_);
  FakeDecode d0("d0", decode_script_);
  FakeDecode d1("d1", decode_script_);
  StartRouter({&p0}, {&d0, &d1});
  ASSERT_TRUE(WaitAllHealthy(3));
  DiesAtOnce(*decode_script_,
             absl::StrCat("cannot get transfer metadata from prefill ", p0.address()),
             /*blame_source=*/false);
  const Reply reply = Generate(TextRequest("hello", 4));
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(Ids(reply.tokens), Expected(4));
  EXPECT_EQ(d0.requests().size(), 1u);
  EXPECT_EQ(d1.requests().size(), 1u);
  EXPECT_EQ(p0.prefills().size(), 2u);  // one prefill node: the resume prefilled there again
}

}  // namespace
}  // namespace tandem::testing_router
