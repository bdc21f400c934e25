// The router end to end against fake nodes (fixture: router_integration_fixture.h): streaming,
// retries, resume, cancellation, bad input.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"
#include "tests/router/router_integration_fixture.h"

namespace tandem::testing_router {
namespace {

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
  const std::vector<v1::PrefillRequest> prefills = prefill.prefills();  // a copy: keep it alive
  ASSERT_EQ(prefills.size(), 2u);
  const auto& ids = prefills[1].prompt_ids();
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

}  // namespace
}  // namespace tandem::testing_router
