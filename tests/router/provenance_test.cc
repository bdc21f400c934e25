// router/provenance.h: layout names, strict mode's decisions and refusal status, and the one JSON
// serialization the HTTP header, the OpenAI `tandem` object and the gRPC trailers carry.
#include "router/provenance.h"

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

TEST(ProvenanceTest, LayoutNamesShowTheAxesThatAreSplit) {
  EXPECT_EQ(LayoutName(2, 1, 1, 1, 16), "tp2 block16");
  EXPECT_EQ(LayoutName(1, 1, 2, 1, 16), "tp1 dcp2 block16");
  EXPECT_EQ(LayoutName(4, 1, 2, 4, 8), "tp4 dcp2 interleave4 block8");
  EXPECT_EQ(LayoutName(4, 2, 1, 1, 16), "tp4 pcp2 block16");
  // Interleave only means something with dcp; unset fields (0) are left out.
  EXPECT_EQ(LayoutName(1, 0, 0, 4, 0), "tp1");
  EXPECT_EQ(LayoutName(0, 1, 1, 1, 16), "");  // no layout reported
}

TEST(ProvenanceTest, StrictRefusesReprefillAndResumeButNotAPrefillRetry) {
  EXPECT_FALSE(StrictRefuses(Recovery::kPrefillRetry));
  EXPECT_TRUE(StrictRefuses(Recovery::kReprefill));
  EXPECT_TRUE(StrictRefuses(Recovery::kResume));
  EXPECT_EQ(RecoveryName(Recovery::kPrefillRetry), "prefill_retry");
  EXPECT_EQ(RecoveryName(Recovery::kReprefill), "reprefill");
  EXPECT_EQ(RecoveryName(Recovery::kResume), "resume");
}

TEST(ProvenanceTest, StrictRefusalIsAbortedAndNamesWhatWasRefusedAndWhy) {
  const absl::Status resume = StrictRefusal(
      Recovery::kResume, absl::UnavailableError("decode node 10.0.0.2:7002: socket closed"));
  EXPECT_EQ(resume.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(resume.message(),
            "strict mode: resuming on another decode node (resume) refused after: decode node "
            "10.0.0.2:7002: socket closed");
  const absl::Status reprefill =
      StrictRefusal(Recovery::kReprefill, absl::AbortedError("KV failed its digests"));
  EXPECT_EQ(reprefill.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(reprefill.message(),
            "strict mode: prefilling again after the KV transfer failed (reprefill) refused "
            "after: KV failed its digests");
}

Provenance Resumed() {
  Provenance p;
  p.final = true;
  p.prefill = {{"p0:1", "tp2 block16"}, {"p0:1", "tp2 block16"}};
  p.decode = {{"d0:2", "tp1 block16", false, 1000, true}, {"d1:3", "tp1 block16", false, 24, true}};
  p.cached_tokens = 5;
  p.failures = {{"decode", "d0:2", "UNAVAILABLE", Recovery::kResume}};
  return p;
}

TEST(ProvenanceTest, JsonNamesEveryHopAndTheTotals) {
  const std::string text = ProvenanceJson(Resumed());
  EXPECT_EQ(text.find('\n'), std::string::npos);
  const Json j = Json::parse(text);
  EXPECT_EQ(j["final"], true);
  EXPECT_EQ(j["mode"], "disaggregated");
  EXPECT_EQ(j["strict"], false);
  ASSERT_EQ(j["prefill"].size(), 2u);
  EXPECT_EQ(j["prefill"][0], (Json{{"node", "p0:1"}, {"layout", "tp2 block16"}}));
  ASSERT_EQ(j["decode"].size(), 2u);
  EXPECT_EQ(j["decode"][1], (Json{{"node", "d1:3"},
                                  {"layout", "tp1 block16"},
                                  {"kv_bytes", 24},
                                  {"digests_verified", true}}));
  EXPECT_EQ(j["kv_bytes"], 1024);
  EXPECT_EQ(j["digests_verified"], true);
  EXPECT_EQ(j["cached_tokens"], 5);
  EXPECT_EQ(j["retries"], 1);
  EXPECT_EQ(j["resumes"], 1);
  EXPECT_EQ(j["reprefills"], 0);
  ASSERT_EQ(j["failures"].size(), 1u);
  EXPECT_EQ(
      j["failures"][0],
      (Json{
          {"role", "decode"}, {"node", "d0:2"}, {"code", "UNAVAILABLE"}, {"recovery", "resume"}}));
  EXPECT_FALSE(j.contains("refused"));
}

TEST(ProvenanceTest, DigestsVerifiedOnlyWhenEveryTransferVerified) {
  Provenance p = Resumed();
  p.decode[1].digests_verified = false;
  EXPECT_FALSE(p.digests_verified());
  EXPECT_EQ(Json::parse(ProvenanceJson(p))["digests_verified"], false);
  // Nothing moved: nothing verified (colocated, or no decode call started).
  Provenance colocated;
  colocated.mode = "colocated";
  colocated.decode = {{"d0:2", "tp1 block16", true, 0, false}};
  EXPECT_FALSE(colocated.digests_verified());
  EXPECT_EQ(Json::parse(ProvenanceJson(colocated))["decode"][0]["colocated"], true);
  EXPECT_FALSE(Provenance().digests_verified());
}

TEST(ProvenanceTest, RefusedRecoveryAndOddAddressesStayValidHeaderText) {
  Provenance p;
  p.strict = true;
  p.refused = "resume";
  p.prefill = {{"n\xc3\xa9ud\n:1", "tp1 block16"}};  // non-ASCII and a newline, from a heartbeat
  const std::string text = ProvenanceJson(p);
  for (char c : text) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << static_cast<int>(c) << " in " << text;
  }
  const Json j = Json::parse(text);
  EXPECT_EQ(j["refused"], "resume");
  EXPECT_EQ(j["strict"], true);
  EXPECT_EQ(j["prefill"][0]["node"], "n\xc3\xa9ud\n:1");
}

}  // namespace
}  // namespace tandem
