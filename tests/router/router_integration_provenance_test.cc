// Provenance and strict mode (router/provenance.h) through the real router and real gRPC against
// the fake nodes: the trailing metadata x-tandem-provenance of every Generate, and strict mode's
// refusals at each decision point of the driver (a resume, a re-prefill after the decode node
// never took the KV) while a prefill retry stays allowed.
#include "nlohmann/json.hpp"
#include "tests/router/router_integration_fixture.h"

namespace tandem::testing_router {
namespace {

using Json = nlohmann::json;

class RouterProvenanceTest : public RouterIntegrationTest {
 protected:
  struct Traced {
    Reply reply;
    Json provenance;  // null when the trailers had none
  };

  Traced GenerateTraced(const v1::GenerateRequest& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    Traced out;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&ctx, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_token()) out.reply.tokens.push_back(response.token());
      if (response.has_final()) out.reply.final = response.final();
    }
    out.reply.status = reader->Finish();
    const auto& trailers = ctx.GetServerTrailingMetadata();
    const auto it = trailers.find("x-tandem-provenance");
    if (it != trailers.end())
      out.provenance = Json::parse(std::string(it->second.data(), it->second.size()));
    return out;
  }

  static v1::GenerateRequest Strict(v1::GenerateRequest r) {
    r.set_strict(true);
    return r;
  }

  void ScriptDecode(DecodeBehaviour b) {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back(std::move(b));
  }
};

TEST_F(RouterProvenanceTest, TrailersNameBothNodesTheirLayoutsAndTheVerifiedKv) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&prefill}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(2));
  const Traced t = GenerateTraced(TextRequest("hello", 4));
  ASSERT_TRUE(t.reply.status.ok()) << t.reply.status.error_message();
  ASSERT_TRUE(t.provenance.is_object());
  const Json& p = t.provenance;
  EXPECT_EQ(p["final"], true);
  EXPECT_EQ(p["mode"], "disaggregated");
  EXPECT_EQ(p["strict"], false);
  EXPECT_EQ(p["prefill"], Json::array({{{"node", prefill.address()}, {"layout", "tp2 block16"}}}));
  EXPECT_EQ(p["decode"], Json::array({{{"node", decode.address()},
                                       {"layout", "tp1 block16"},
                                       {"kv_bytes", kFakeKvBytes},
                                       {"digests_verified", true}}}));
  EXPECT_EQ(p["kv_bytes"], kFakeKvBytes);
  EXPECT_EQ(p["digests_verified"], true);
  EXPECT_EQ(p["retries"], 0);
  EXPECT_EQ(p["resumes"], 0);
  EXPECT_TRUE(p["failures"].empty());
}

TEST_F(RouterProvenanceTest, ResumeIsRecordedAndStrictModeRefusesIt) {
  FakePrefill prefill("p0", prefill_script_);
  FakeDecode d0("d0", decode_script_);
  FakeDecode d1("d1", decode_script_);
  StartRouter({&prefill}, {&d0, &d1});
  ASSERT_TRUE(WaitAllHealthy(3));
  constexpr int kMax = 8;
  ScriptDecode(DecodeBehaviour{.die_after = 2});
  const Traced lenient = GenerateTraced(TextRequest("hi", kMax));
  ASSERT_TRUE(lenient.reply.status.ok()) << lenient.reply.status.error_message();
  EXPECT_EQ(Ids(lenient.reply.tokens), Expected(kMax));
  const Json& p = lenient.provenance;
  EXPECT_EQ(p["resumes"], 1);
  EXPECT_EQ(p["retries"], 1);
  EXPECT_EQ(p["reprefills"], 0);
  ASSERT_EQ(p["failures"].size(), 1u);
  EXPECT_EQ(p["failures"][0]["role"], "decode");
  EXPECT_EQ(p["failures"][0]["code"], "UNAVAILABLE");
  EXPECT_EQ(p["failures"][0]["recovery"], "resume");
  EXPECT_EQ(p["prefill"].size(), 2u);  // the prompt, then prompt + g0 g1
  ASSERT_EQ(p["decode"].size(), 2u);
  EXPECT_NE(p["decode"][0]["node"], p["decode"][1]["node"]);
  EXPECT_EQ(p["failures"][0]["node"], p["decode"][0]["node"]);

  const size_t calls_before = d0.requests().size() + d1.requests().size();
  ScriptDecode(DecodeBehaviour{.die_after = 2});
  const Traced strict = GenerateTraced(Strict(TextRequest("hi", kMax)));
  EXPECT_EQ(strict.reply.status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(strict.reply.status.error_message(),
              HasSubstr("strict mode: resuming on another decode node (resume) refused after: "
                        "decode node "));
  EXPECT_THAT(strict.reply.status.error_message(), HasSubstr("fake decode node died"));
  EXPECT_EQ(Ids(strict.reply.tokens), Expected(3));  // g0 from prefill, g1 g2 before the death
  EXPECT_EQ(d0.requests().size() + d1.requests().size(), calls_before + 1) << "no resume call";
  EXPECT_EQ(strict.provenance["strict"], true);
  EXPECT_EQ(strict.provenance["refused"], "resume");
  EXPECT_EQ(strict.provenance["resumes"], 0);
  EXPECT_EQ(strict.provenance["final"], true);
}

TEST_F(RouterProvenanceTest, StrictRouterRefusesAReprefillAfterTheKvNeverArrived) {
  router_strict_ = true;  // --strict: every request, without asking
  FakePrefill p0("p0", prefill_script_);
  FakePrefill p1("p1", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&p0, &p1}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(3));
  // The decode node's pull from the prefill node fails before its first event.
  ScriptDecode(DecodeBehaviour{.die_after = 0, .die_message = "pull failed", .blame_source = true});
  const Traced t = GenerateTraced(TextRequest("hi", 6));
  EXPECT_EQ(t.reply.status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(t.reply.status.error_message(),
              HasSubstr("strict mode: prefilling again after the KV transfer failed (reprefill) "
                        "refused after: prefill node "));
  EXPECT_EQ(p0.prefills().size() + p1.prefills().size(), 1u) << "no second prefill";
  EXPECT_EQ(t.provenance["refused"], "reprefill");
  EXPECT_TRUE(t.provenance["decode"].empty());  // no decode call started serving
  // The router still owned the KV: released, not leaked.
  EXPECT_TRUE(p0.WaitForReleases(p0.prefills().size(), kWait));
  EXPECT_TRUE(p1.WaitForReleases(p1.prefills().size(), kWait));
}

TEST_F(RouterProvenanceTest, ReprefillIsRecordedWhenNotStrict) {
  FakePrefill p0("p0", prefill_script_);
  FakePrefill p1("p1", prefill_script_);
  FakeDecode decode("d0", decode_script_);
  StartRouter({&p0, &p1}, {&decode});
  ASSERT_TRUE(WaitAllHealthy(3));
  ScriptDecode(DecodeBehaviour{.die_after = 0, .die_message = "pull failed", .blame_source = true});
  const Traced t = GenerateTraced(TextRequest("hi", 6));
  ASSERT_TRUE(t.reply.status.ok()) << t.reply.status.error_message();
  EXPECT_EQ(Ids(t.reply.tokens), Expected(6));
  EXPECT_EQ(t.provenance["reprefills"], 1);
  EXPECT_EQ(t.provenance["resumes"], 0);
  ASSERT_EQ(t.provenance["failures"].size(), 1u);
  // Blamed on the prefill node the KV came from, as the decode node reported.
  EXPECT_EQ(t.provenance["failures"][0]["role"], "prefill");
  EXPECT_EQ(t.provenance["failures"][0]["node"], t.provenance["prefill"][0]["node"]);
  EXPECT_EQ(t.provenance["decode"].size(), 1u);
}

TEST_F(RouterProvenanceTest, StrictModeStillRetriesAPrefillThatProducedNothing) {
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
  const Traced t = GenerateTraced(Strict(TextRequest("hello", 4)));
  ASSERT_TRUE(t.reply.status.ok()) << t.reply.status.error_message();
  EXPECT_EQ(Ids(t.reply.tokens), Expected(4));
  EXPECT_EQ(t.provenance["strict"], true);
  EXPECT_EQ(t.provenance["retries"], 1);
  ASSERT_EQ(t.provenance["failures"].size(), 1u);
  EXPECT_EQ(t.provenance["failures"][0]["recovery"], "prefill_retry");
  EXPECT_EQ(t.provenance["prefill"].size(), 1u);
  EXPECT_FALSE(t.provenance.contains("refused"));
}

}  // namespace
}  // namespace tandem::testing_router
