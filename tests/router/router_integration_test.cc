// The real router library, served on 127.0.0.1:0 with real gRPC, against fake prefill/decode
// nodes in this process (fake_nodes.h). Every wait is a bounded wait on a condition.
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/prometheus_text.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"
#include "router/router_server.h"
#include "router/unary_call.h"
#include "tandem/v1/router.grpc.pb.h"
#include "tests/router/fake_nodes.h"
#include "tests/router/test_model.h"

namespace tandem::testing_router {
namespace {

using testing::ElementsAre;
using testing::ElementsAreArray;
using testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);  // bound of every wait in these tests
constexpr int64_t kContext = 64;

struct Reply {
  std::vector<v1::TokenChunk> tokens;
  std::optional<v1::GenerateFinal> final;
  grpc::Status status;
};

std::vector<int32_t> Ids(const std::vector<v1::TokenChunk>& tokens) {
  std::vector<int32_t> ids;
  for (const v1::TokenChunk& t : tokens) ids.push_back(t.id());
  return ids;
}

std::vector<int32_t> Expected(int n, int from = 0) {
  std::vector<int32_t> ids;
  for (int i = from; i < n; ++i) ids.push_back(TokenForStep(i));
  return ids;
}

class RouterIntegrationTest : public testing::Test {
 protected:
  // Starts the router over the given fakes (nullptr entries are skipped); extra addresses
  // (e.g. of nothing) may be appended to the decode list.
  void StartRouter(const std::vector<FakePrefill*>& prefills,
                   const std::vector<FakeDecode*>& decodes,
                   std::vector<std::string> extra_decode = {}) {
    RouterOptions options;
    options.listen = "127.0.0.1:0";
    for (FakePrefill* p : prefills) options.prefill_nodes.push_back(p->address());
    for (FakeDecode* d : decodes) options.decode_nodes.push_back(d->address());
    for (std::string& a : extra_decode) options.decode_nodes.push_back(std::move(a));
    options.health_interval = absl::Milliseconds(50);
    options.rpc_timeout = absl::Seconds(5);
    options.decode_idle_timeout = absl::Seconds(5);
    options.max_attempts = 3;
    options.retry.wait_budget = wait_budget_;
    std::unique_ptr<ServedModel> model = MakeTestModel(kContext);
    ASSERT_NE(model, nullptr);
    absl::StatusOr<std::unique_ptr<RouterServer>> router =
        RouterServer::Start(options, std::move(model), [this](const std::string& line) {
          absl::MutexLock lock(&log_mu_);
          log_.push_back(line);
        });
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", router_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Router::NewStub(channel_);
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

  // Polls ClusterStatus until `pred` holds or kWait passes.
  template <typename Pred>
  bool WaitForCluster(Pred pred) {
    const absl::Time deadline = absl::Now() + kWait;
    while (absl::Now() < deadline) {
      if (pred(Cluster())) return true;
      // Polling interval for an observed condition, not synchronisation by sleeping.
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  bool WaitAllHealthy(int n) {
    return WaitForCluster([n](const v1::ClusterStatusResponse& c) {
      int healthy = 0;
      for (const v1::NodeStatus& node : c.nodes()) healthy += node.healthy() ? 1 : 0;
      return c.nodes_size() == n && healthy == n;
    });
  }

  static v1::GenerateRequest TextRequest(const std::string& text, int max_tokens) {
    v1::GenerateRequest r;
    r.set_text(text);
    r.set_max_tokens(max_tokens);
    return r;
  }

  // `with_deadline` false sends no deadline at all (the router must still bound its calls).
  Reply Generate(const v1::GenerateRequest& request, bool with_deadline = true) {
    grpc::ClientContext ctx;
    if (with_deadline) ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    Reply reply;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&ctx, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_token()) reply.tokens.push_back(response.token());
      if (response.has_final()) reply.final = response.final();
    }
    reply.status = reader->Finish();
    return reply;
  }

  std::vector<std::string> Log() {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

  std::shared_ptr<PrefillScript> prefill_script_ = std::make_shared<PrefillScript>();
  std::shared_ptr<DecodeScript> decode_script_ = std::make_shared<DecodeScript>();
  // How long a request waits for a healthy node of a role (RetryPolicy::wait_budget).
  absl::Duration wait_budget_ = absl::Milliseconds(300);
  std::unique_ptr<RouterServer> router_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Router::Stub> stub_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

// Clients may reuse a request id (two at once, or a retry of their own): the ids the nodes get
// differ, so a release by request id (router/kv_releaser) can only free that request's lease.
TEST_F(RouterIntegrationTest, RequestsReusingAClientIdReachTheNodesUnderDistinctIds) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));
  for (int i = 0; i < 2; ++i) {
    v1::GenerateRequest request = TextRequest("hi", 2);
    request.set_request_id("same-id");
    const Reply reply = Generate(request);
    ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
    ASSERT_TRUE(reply.final.has_value());
    EXPECT_EQ(reply.final->request_id(), "same-id");  // the client sees its own id
  }
  const std::vector<v1::PrefillRequest> prefills = prefill.prefills();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_THAT(prefills[0].request_id(), testing::StartsWith("same-id#"));
  EXPECT_THAT(prefills[1].request_id(), testing::StartsWith("same-id#"));
  EXPECT_NE(prefills[0].request_id(), prefills[1].request_id());
  const std::vector<v1::DecodeRequest> decodes = decode.requests();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_NE(decodes[0].request_id(), decodes[1].request_id());
}

TEST_F(RouterIntegrationTest, HappyPathStreamsEveryTokenInOrderWithText) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));

  v1::GenerateRequest request = TextRequest("hi", 5);
  request.set_request_id("happy-1");
  request.mutable_sampling()->set_temperature(0.5f);
  request.mutable_sampling()->set_seed(42);
  const Reply reply = Generate(request);
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(Ids(reply.tokens), Expected(5));
  std::string text;
  for (size_t i = 0; i < reply.tokens.size(); ++i) {
    EXPECT_EQ(reply.tokens[i].index(), static_cast<int>(i));
    text += reply.tokens[i].text();
  }
  EXPECT_EQ(text, "abcde");
  ASSERT_TRUE(reply.final.has_value());
  EXPECT_EQ(reply.final->finish_reason(), "length");
  EXPECT_EQ(reply.final->usage().prompt_tokens(), 2);
  EXPECT_EQ(reply.final->usage().completion_tokens(), 5);
  EXPECT_EQ(reply.final->request_id(), "happy-1");
  EXPECT_EQ(reply.final->text_tail(), "");
  EXPECT_EQ(reply.final->retries(), 0);
  EXPECT_GT(reply.final->ttft_us(), 0);
  EXPECT_GE(reply.final->total_us(), reply.final->ttft_us());

  // What the nodes were asked.
  const std::vector<v1::PrefillRequest> prefills = prefill.prefills();
  ASSERT_EQ(prefills.size(), 1u);
  // The client's id with this router's nonce and sequence (unique though clients reuse ids).
  EXPECT_THAT(prefills[0].request_id(), testing::StartsWith("happy-1#"));
  EXPECT_THAT(prefills[0].prompt_ids(), ElementsAre(ByteToken('h'), ByteToken('i')));
  EXPECT_EQ(prefills[0].sample_step(), 0u);
  EXPECT_EQ(prefills[0].max_new_tokens(), 5);
  EXPECT_EQ(prefills[0].sampling().top_p(), 1.f);  // unset -> 1
  EXPECT_EQ(prefills[0].sampling().seed(), 42u);
  const std::vector<v1::DecodeRequest> decodes = decode.requests();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].first_token(), TokenForStep(0));
  EXPECT_EQ(decodes[0].max_new_tokens(), 5);
  EXPECT_EQ(decodes[0].next_step(), 1u);
  EXPECT_THAT(decodes[0].stop_ids(), testing::UnorderedElementsAre(0, 2));
  EXPECT_EQ(decodes[0].kv().generation(), prefill.handles()[0].generation());
  EXPECT_EQ(decodes[0].sampling().temperature(), 0.5f);
  EXPECT_TRUE(prefill.releases().empty());  // the decode node releases the KV, not the router

  EXPECT_THAT(Log(), testing::Contains(
                         HasSubstr("request request_id=happy-1 outcome=OK finish_reason=length "
                                   "prompt_tokens=2 generated_tokens=5 prefill_ms=")));
}

TEST_F(RouterIntegrationTest, RequestWithoutAClientDeadlineIsServed) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));
  const Reply reply = Generate(TextRequest("hi", 3), /*with_deadline=*/false);
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(Ids(reply.tokens), Expected(3));
}

TEST_F(RouterIntegrationTest, ChatPromptIsFormattedAndStopTokenFromPrefillEndsTheRequest) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));
  {
    absl::MutexLock lock(&prefill_script_->mu);
    prefill_script_->first_token = 2;  // <|im_end|>
  }
  v1::GenerateRequest request;
  v1::ChatMessage* m = request.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  request.set_max_tokens(4);
  const Reply reply = Generate(request);
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_TRUE(reply.tokens.empty());
  ASSERT_TRUE(reply.final.has_value());
  EXPECT_EQ(reply.final->finish_reason(), "stop");
  EXPECT_EQ(reply.final->usage().completion_tokens(), 0);
  EXPECT_THAT(reply.final->request_id(), testing::StartsWith("req-"));
  ASSERT_EQ(prefill.prefills().size(), 1u);
  EXPECT_EQ(prefill.prefills()[0].prompt_ids(0), 1);  // <|im_start|>
  // Nobody will take this KV, so the router frees it.
  ASSERT_TRUE(prefill.WaitForReleases(1, kWait));
  EXPECT_EQ(prefill.releases()[0].generation(), prefill.handles()[0].generation());
  EXPECT_TRUE(decode.requests().empty());
  // The assistant turn is opened by default; continue_final_message (add_generation_prompt false)
  // leaves the last message open instead: the prompt ends with its text.
  EXPECT_EQ(prefill.prefills()[0].prompt_ids(prefill.prefills()[0].prompt_ids_size() - 1),
            ByteToken('\n'));
  v1::ChatMessage* prefix = request.mutable_chat()->add_messages();
  prefix->set_role("assistant");
  prefix->set_content("ok");
  request.mutable_chat()->set_add_generation_prompt(false);
  request.mutable_chat()->set_continue_final_message(true);
  ASSERT_TRUE(Generate(request).status.ok());
  ASSERT_EQ(prefill.prefills().size(), 2u);
  const auto& ids = prefill.prefills()[1].prompt_ids();
  ASSERT_GE(ids.size(), 2);
  EXPECT_EQ(ids[ids.size() - 2], ByteToken('o'));
  EXPECT_EQ(ids[ids.size() - 1], ByteToken('k'));
}

TEST_F(RouterIntegrationTest, PrefillUnavailableIsRetriedOnTheOtherNode) {
  FakePrefill p0("p0", prefill_script_);
  FakePrefill p1("p1", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&p0, &p1}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(3));
  {
    absl::MutexLock lock(&prefill_script_->mu);
    prefill_script_->failures.push_back(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "prefill node going away"));
  }
  const Reply reply = Generate(TextRequest("hello", 4));
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(Ids(reply.tokens), Expected(4));
  ASSERT_TRUE(reply.final.has_value());
  EXPECT_EQ(reply.final->retries(), 1);
  // One call failed on one node, the retry went to the other one.
  ASSERT_EQ(p0.prefills().size(), 1u);
  ASSERT_EQ(p1.prefills().size(), 1u);
  EXPECT_THAT(p0.prefills()[0].prompt_ids(), ElementsAreArray(p1.prefills()[0].prompt_ids()));
  EXPECT_EQ(p0.handles().size() + p1.handles().size(), 1u);
}

TEST_F(RouterIntegrationTest, NonRetryableNodeErrorReachesTheClientUnchanged) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));
  {
    absl::MutexLock lock(&prefill_script_->mu);
    prefill_script_->failures.push_back(
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no KV blocks within 30 s"));
  }
  const Reply reply = Generate(TextRequest("hello", 4));
  EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(reply.status.error_message(), "no KV blocks within 30 s");
  EXPECT_EQ(prefill.prefills().size(), 1u);
}

// The decode node's finish reason travels as an enum and reaches the client as the names it
// always had; a finish event without a valid reason fails the request instead of reading as
// "length".
TEST_F(RouterIntegrationTest, DecodeFinishReasonReachesTheClientByName) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode d0("d0", decode_script_);
  StartRouter({&prefill}, {&d0});
  ASSERT_TRUE(WaitAllHealthy(2));
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back(DecodeBehaviour{.finish = v1::FINISH_REASON_STOP});
    decode_script_->calls.push_back(DecodeBehaviour{.finish = v1::FINISH_REASON_UNSPECIFIED});
    decode_script_->calls.push_back(DecodeBehaviour{.finish = v1::FINISH_REASON_CANCELLED});
  }
  const Reply stop = Generate(TextRequest("hi", 4));
  ASSERT_TRUE(stop.status.ok()) << stop.status.error_message();
  ASSERT_TRUE(stop.final.has_value());
  EXPECT_EQ(stop.final->finish_reason(), "stop");
  const Reply unset = Generate(TextRequest("hi", 4));
  EXPECT_EQ(unset.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(unset.status.error_message(), HasSubstr("finish reason 0 (unspecified"));
  const Reply cancelled = Generate(TextRequest("hi", 4));
  EXPECT_EQ(cancelled.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(cancelled.status.error_message(), HasSubstr("with reason cancelled"));
  const Reply normal = Generate(TextRequest("hi", 4));
  ASSERT_TRUE(normal.status.ok()) << normal.status.error_message();
  EXPECT_EQ(normal.final->finish_reason(), "length");
}

TEST_F(RouterIntegrationTest, DecodeDeathMidStreamResumesOnTheOtherNodeWithoutDuplicates) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode d0("d0", decode_script_);
  FakeDecode d1("d1", decode_script_);
  StartRouter({&prefill}, {&d0, &d1});
  ASSERT_TRUE(WaitAllHealthy(3));
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back(DecodeBehaviour{.die_after = 2});
  }
  constexpr int kMax = 8;
  const Reply reply = Generate(TextRequest("hi", kMax));
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(Ids(reply.tokens), Expected(kMax));  // each token exactly once, in order
  for (int i = 0; i < kMax; ++i) EXPECT_EQ(reply.tokens[i].index(), i);
  ASSERT_TRUE(reply.final.has_value());
  EXPECT_EQ(reply.final->retries(), 1);
  EXPECT_EQ(reply.final->usage().completion_tokens(), kMax);

  // The first decode call streamed g1, g2 and died; the client had g0..g2 (k = 3).
  const std::vector<v1::DecodeRequest> on_d0 = d0.requests();
  const std::vector<v1::DecodeRequest> on_d1 = d1.requests();
  ASSERT_EQ(on_d0.size(), 1u) << "each decode node gets one call";
  ASSERT_EQ(on_d1.size(), 1u);
  const bool d0_first = on_d0[0].next_step() == 1u;
  const v1::DecodeRequest& first = d0_first ? on_d0[0] : on_d1[0];
  const v1::DecodeRequest& resumed = d0_first ? on_d1[0] : on_d0[0];
  EXPECT_EQ(first.first_token(), TokenForStep(0));
  EXPECT_EQ(first.max_new_tokens(), kMax);
  EXPECT_EQ(resumed.first_token(), TokenForStep(2));
  EXPECT_EQ(resumed.max_new_tokens(), kMax - 2);
  EXPECT_EQ(resumed.next_step(), 3u);

  // The resume prefilled prompt + g0 g1, drawing step 2 (its token ignored).
  const std::vector<v1::PrefillRequest> prefills = prefill.prefills();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_THAT(prefills[1].prompt_ids(),
              ElementsAre(ByteToken('h'), ByteToken('i'), TokenForStep(0), TokenForStep(1)));
  EXPECT_EQ(prefills[1].sample_step(), 2u);
  EXPECT_EQ(prefills[1].max_new_tokens(), kMax - 2);
  EXPECT_NE(prefills[1].request_id(), prefills[0].request_id());
  EXPECT_EQ(resumed.kv().generation(), prefill.handles()[1].generation());
  // Both decode calls took their KV, so the router released nothing itself.
  EXPECT_TRUE(prefill.releases().empty());
}

// Sampling penalties read the token history (model/token_history.h): every decode call carries
// the ids of the KV it takes — the prompt, then the tokens streamed before its first token — so a
// resumed call's penalties see g0 g1 as before. min_tokens masks the router's stop ids, the
// client's stop_token_ids included.
TEST_F(RouterIntegrationTest, PenalisedRequestSendsTheKvTokenIdsToEveryDecodeCall) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode d0("d0", decode_script_);
  FakeDecode d1("d1", decode_script_);
  StartRouter({&prefill}, {&d0, &d1});
  ASSERT_TRUE(WaitAllHealthy(3));
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back(DecodeBehaviour{.die_after = 2});
  }
  constexpr int kMax = 8;
  v1::GenerateRequest request = TextRequest("hi", kMax);
  request.mutable_sampling()->set_repetition_penalty(1.2f);
  request.mutable_sampling()->set_min_tokens(2);
  request.mutable_sampling()->add_min_tokens_stop_ids(77);  // the client's: replaced
  request.add_stop_token_ids(1);
  const Reply reply = Generate(request);
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(Ids(reply.tokens), Expected(kMax));
  const std::vector<v1::DecodeRequest> on_d0 = d0.requests();
  const std::vector<v1::DecodeRequest> on_d1 = d1.requests();
  ASSERT_EQ(on_d0.size(), 1u);
  ASSERT_EQ(on_d1.size(), 1u);
  const bool d0_first = on_d0[0].next_step() == 1u;
  const v1::DecodeRequest& first = d0_first ? on_d0[0] : on_d1[0];
  const v1::DecodeRequest& resumed = d0_first ? on_d1[0] : on_d0[0];
  EXPECT_THAT(first.context_ids(), ElementsAre(ByteToken('h'), ByteToken('i')));
  EXPECT_THAT(resumed.context_ids(),
              ElementsAre(ByteToken('h'), ByteToken('i'), TokenForStep(0), TokenForStep(1)));
  EXPECT_EQ(resumed.next_step(), 3u);
  EXPECT_THAT(first.stop_ids(), testing::UnorderedElementsAre(0, 1, 2));
  const std::vector<v1::PrefillRequest> prefills = prefill.prefills();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_THAT(prefills[0].sampling().min_tokens_stop_ids(), testing::UnorderedElementsAre(0, 1, 2));
  EXPECT_EQ(prefills[0].sampling().repetition_penalty(), 1.2f);
  // Without a penalty the ids are not sent.
  const Reply plain = Generate(TextRequest("hi", 3));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  const std::vector<v1::DecodeRequest> all_d0 = d0.requests();
  const std::vector<v1::DecodeRequest> all_d1 = d1.requests();
  const v1::DecodeRequest& last = all_d0.size() == 2 ? all_d0.back() : all_d1.back();
  EXPECT_TRUE(last.context_ids().empty());
  EXPECT_TRUE(last.sampling().min_tokens_stop_ids().empty());
}

TEST_F(RouterIntegrationTest, ClientCancellationMidStreamCancelsTheDecodeCall) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back(DecodeBehaviour{.hang_after = 2});
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  auto reader = stub_->Generate(&ctx, TextRequest("hi", 10));
  v1::GenerateResponse response;
  std::vector<int32_t> got;
  while (got.size() < 3 && reader->Read(&response)) got.push_back(response.token().id());
  EXPECT_EQ(got, Expected(3));
  ctx.TryCancel();
  EXPECT_TRUE(decode.WaitForCancelled(1, kWait));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(prefill.releases().empty());  // the decode node had taken the KV
}

TEST_F(RouterIntegrationTest, CancellationBeforeDecodeTookTheKvReleasesIt) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back(DecodeBehaviour{.hang_after = 0});  // never sends anything
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  auto reader = stub_->Generate(&ctx, TextRequest("hi", 10));
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));  // the first token, from prefill
  EXPECT_EQ(response.token().id(), TokenForStep(0));
  ctx.TryCancel();
  ASSERT_TRUE(prefill.WaitForReleases(1, kWait));
  const v1::ReleaseKvRequest release = prefill.releases()[0];
  const v1::KvHandle handle = prefill.handles()[0];
  EXPECT_EQ(release.request_id(), handle.request_id());
  EXPECT_EQ(release.epoch(), handle.epoch());
  EXPECT_EQ(release.generation(), handle.generation());
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(RouterIntegrationTest, BadInputGetsExactStatuses) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  struct Case {
    v1::GenerateRequest request;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  const auto add = [&cases](v1::GenerateRequest r, grpc::StatusCode code, std::string message) {
    cases.push_back({std::move(r), code, std::move(message)});
  };
  v1::GenerateRequest r = TextRequest("hi", 4);
  r.set_model("gpt-9");
  add(r, grpc::StatusCode::NOT_FOUND,
      "model 'gpt-9' is not served here; this router serves 'tiny-test'");
  r = TextRequest("hi", 4);
  r.set_model(kTestModelName);
  r.set_max_tokens(0);
  add(r, grpc::StatusCode::INVALID_ARGUMENT, "max_tokens must be >= 1 (got 0)");
  r = v1::GenerateRequest();
  r.set_max_tokens(4);
  add(r, grpc::StatusCode::INVALID_ARGUMENT, "no prompt: set one of text, token_ids or chat");
  add(TextRequest("", 4), grpc::StatusCode::INVALID_ARGUMENT, "prompt text is empty");
  r = v1::GenerateRequest();
  r.set_max_tokens(4);
  r.mutable_chat()->add_messages()->set_role("user");
  r.mutable_chat()->set_continue_final_message(true);  // add_generation_prompt unset: true
  add(r, grpc::StatusCode::INVALID_ARGUMENT,
      "chat.continue_final_message and chat.add_generation_prompt cannot both be true");
  r = TextRequest("hi", 4);
  r.mutable_sampling()->set_temperature(-1.f);
  add(r, grpc::StatusCode::INVALID_ARGUMENT, "temperature must be a finite number >= 0 (got -1)");
  r = TextRequest("hi", 4);
  r.mutable_sampling()->set_top_p(2.f);
  add(r, grpc::StatusCode::INVALID_ARGUMENT, "top_p must be in (0, 1] (got 2)");
  r = TextRequest("hi", 4);
  r.mutable_sampling()->set_top_p(0.f);  // explicit 0 is not "unset" (unset reads as 1)
  add(r, grpc::StatusCode::INVALID_ARGUMENT, "top_p must be in (0, 1] (got 0)");
  r = TextRequest("hi", 4);
  r.mutable_sampling()->set_top_k(-5);
  add(r, grpc::StatusCode::INVALID_ARGUMENT, "top_k must be >= 0 (got -5)");
  r = TextRequest("hi", 4);
  r.mutable_token_ids()->add_ids(5);
  r.mutable_token_ids()->add_ids(kTestVocab);
  add(r, grpc::StatusCode::INVALID_ARGUMENT,
      "prompt token id 260 at position 1 is outside the vocabulary [0, 260)");
  r = TextRequest("hi", 4);
  for (int i = 0; i < kContext + 1; ++i) r.mutable_token_ids()->add_ids(5);
  add(r, grpc::StatusCode::INVALID_ARGUMENT,
      "prompt has 65 tokens, more than the model's context length 64");
  r = TextRequest("hi", 63);
  add(r, grpc::StatusCode::INVALID_ARGUMENT,
      "prompt (2 tokens) + max_tokens (63) = 65 exceeds the model's context length 64");
  // A field this router's schema does not know (a newer client's) is refused, not ignored.
  r = TextRequest("hi", 4);
  r.GetReflection()->MutableUnknownFields(&r)->AddVarint(999, 1);
  add(r, grpc::StatusCode::INVALID_ARGUMENT,
      "GenerateRequest has field number 999, which this router does not know: a newer client's "
      "field would be ignored, so the request is refused (upgrade the router)");
  r = TextRequest("hi", 4);
  v1::SamplingParams* sampling = r.mutable_sampling();
  sampling->GetReflection()->MutableUnknownFields(sampling)->AddFixed32(998, 7);
  add(r, grpc::StatusCode::INVALID_ARGUMENT,
      "GenerateRequest.sampling has field number 998, which this router does not know: a newer "
      "client's field would be ignored, so the request is refused (upgrade the router)");
  for (const Case& c : cases) {
    const Reply reply = Generate(c.request);
    EXPECT_EQ(reply.status.error_code(), c.code) << c.message;
    EXPECT_EQ(reply.status.error_message(), c.message);
    EXPECT_TRUE(reply.tokens.empty());
  }
  EXPECT_TRUE(prefill.prefills().empty());  // nothing reached a node
}

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
