// router/http/openai_tandem.h: the request's `tandem` object and the response's.
#include "gtest/gtest.h"
#include "router/http/openai_request.h"
#include "router/http/openai_tandem.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

std::string Param(const absl::Status& s) {
  const auto p = s.GetPayload(kOpenAiParamPayload);
  return p.has_value() ? std::string(*p) : "<none>";
}

TEST(OpenAiTandemTest, AbsentNullOrEmptyAsksForNothing) {
  for (const char* body :
       {R"({})", R"({"tandem": null})", R"({"tandem": {}})", R"({"tandem": {"strict": null}})"}) {
    absl::StatusOr<TandemRequestOptions> o = ParseTandemOptions(Json::parse(body));
    ASSERT_TRUE(o.ok()) << body << ": " << o.status();
    EXPECT_FALSE(o->provenance) << body;
    EXPECT_FALSE(o->strict) << body;
  }
}

TEST(OpenAiTandemTest, ProvenanceAndStrictAreRead) {
  absl::StatusOr<TandemRequestOptions> o =
      ParseTandemOptions(Json::parse(R"({"tandem": {"provenance": true, "strict": true}})"));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->provenance);
  EXPECT_TRUE(o->strict);
  // Through the whole request parser, on both endpoints.
  absl::StatusOr<OpenAiRequest> chat = ParseOpenAiRequest(
      OpenAiEndpoint::kChatCompletions,
      R"({"messages": [{"role": "user", "content": "hi"}], "tandem": {"strict": true}})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->tandem.strict);
  EXPECT_FALSE(chat->tandem.provenance);
  EXPECT_TRUE(chat->unknown_fields.empty());
  absl::StatusOr<OpenAiRequest> cmpl = ParseOpenAiRequest(
      OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "tandem": {"provenance": true}})");
  ASSERT_TRUE(cmpl.ok()) << cmpl.status();
  EXPECT_TRUE(cmpl->tandem.provenance);
}

TEST(OpenAiTandemTest, AMisspeltOrMistypedOptionIsRefusedByName) {
  absl::StatusOr<TandemRequestOptions> typo =
      ParseTandemOptions(Json::parse(R"({"tandem": {"strcit": true}})"));
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Param(typo.status()), "tandem.strcit");
  EXPECT_EQ(typo.status().message(),
            "'tandem.strcit' is not a Tandem option (known: tandem.provenance, tandem.strict)");
  absl::StatusOr<TandemRequestOptions> type =
      ParseTandemOptions(Json::parse(R"({"tandem": {"strict": "yes"}})"));
  EXPECT_EQ(type.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Param(type.status()), "tandem.strict");
  absl::StatusOr<TandemRequestOptions> scalar =
      ParseTandemOptions(Json::parse(R"({"tandem": true})"));
  EXPECT_EQ(scalar.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Param(scalar.status()), "tandem");
}

TEST(OpenAiTandemTest, ResponseGetsTheProvenanceUnderTandem) {
  const std::string body = WithTandemObject(R"({"id": "cmpl-1", "usage": {"prompt_tokens": 2}})",
                                            R"({"final": true, "retries": 0})");
  const Json j = Json::parse(body);
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["tandem"], (Json{{"provenance", {{"final", true}, {"retries", 0}}}}));
}

}  // namespace
}  // namespace tandem
