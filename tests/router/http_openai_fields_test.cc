// router/http/openai_fields.h: the known fields, their refusals, and docs/router.md's table
// listing every one of them (so the docs stay true when a field is added).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "router/http/openai_fields.h"

namespace tandem {
namespace {

using Json = nlohmann::json;
constexpr OpenAiEndpoint kChat = OpenAiEndpoint::kChatCompletions;
constexpr OpenAiEndpoint kCmpl = OpenAiEndpoint::kCompletions;

std::string Param(const absl::Status& s) {
  const auto p = s.GetPayload(kOpenAiParamPayload);
  return p.has_value() ? std::string(*p) : "<none>";
}

TEST(OpenAiFieldsTest, EveryKnownFieldIsInTheDocsTable) {
  std::ifstream in(std::string(TANDEM_SOURCE_DIR) + "/docs/router.md");
  ASSERT_TRUE(in.good());
  std::stringstream docs;
  docs << in.rdbuf();
  const std::string text = docs.str();
  const size_t table = text.find("| field | endpoints | behaviour |");
  ASSERT_NE(table, std::string::npos);
  const std::string rows = text.substr(table, text.find("\n\n", table) - table);
  for (const OpenAiEndpoint endpoint : {kChat, kCmpl}) {
    for (const std::string& field : KnownFields(endpoint)) {
      // `field` or its sub-fields (`stream_options.include_usage`).
      EXPECT_TRUE(rows.find("`" + field + "`") != std::string::npos ||
                  rows.find("`" + field + ".") != std::string::npos)
          << field << " is known but not in docs/router.md's field table";
    }
  }
}

TEST(OpenAiFieldsTest, EndpointsKnowTheirOwnFields) {
  EXPECT_TRUE(IsKnownField(kChat, "messages"));
  EXPECT_FALSE(IsKnownField(kCmpl, "messages"));
  EXPECT_TRUE(IsKnownField(kCmpl, "suffix"));
  EXPECT_FALSE(IsKnownField(kChat, "suffix"));
  EXPECT_FALSE(IsKnownField(kChat, "no_such_field"));
  EXPECT_EQ(UnknownFields(kChat, Json::parse(R"({"b": 1, "model": "m", "a": 2})")),
            (std::vector<std::string>{"a", "b"}));
}

TEST(OpenAiFieldsTest, RefusesOnlyWhatAsksForSomething) {
  const Json neutral = Json::parse(R"({"response_format": null, "tools": null, "store": false,
      "modalities": ["text"], "service_tier": "default", "length_penalty": 1, "priority": 0,
      "skip_special_tokens": null, "user": {"any": "thing"}})");
  EXPECT_TRUE(RefuseUnsupportedFields(kChat, neutral).ok());
  const absl::Status audio =
      RefuseUnsupportedFields(kChat, Json::parse(R"({"modalities": ["text", "audio"]})"));
  EXPECT_EQ(audio.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Param(audio), "modalities");
  EXPECT_EQ(audio.message(), "'modalities' is not supported: only [\"text\"]");
  EXPECT_EQ(Param(RefuseUnsupportedFields(kCmpl, Json::parse(R"({"length_penalty": 0.5})"))),
            "length_penalty");
  EXPECT_EQ(Param(RefuseUnsupportedFields(kChat, Json::parse(R"({"priority": -1})"))), "priority");
  // A chat-only field on /v1/completions is unknown there, not refused.
  EXPECT_TRUE(RefuseUnsupportedFields(kCmpl, Json::parse(R"({"store": true})")).ok());
}

}  // namespace
}  // namespace tandem
