// router/http/openai_tools.h: tools / tool_choice parsing, the forced-call grammar, the output
// parsers of the three formats, the streaming hold-back point and the Hermes fallback texts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/grammar/gbnf.h"
#include "router/http/openai_request.h"
#include "router/http/openai_tools.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kWeather[] = R"({"tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
    "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time"}}])";

absl::StatusOr<std::optional<OpenAiTools>> Parse(const std::string& extra) {
  const std::string body = std::string(kWeather) + extra + "}";
  return ParseOpenAiTools(Json::parse(body), body);
}

std::string Param(const absl::Status& s) {
  const auto p = s.GetPayload(kOpenAiParamPayload);
  return p.has_value() ? std::string(*p) : "<none>";
}

TEST(OpenAiToolsTest, ParsesToolsAndEveryToolChoice) {
  auto autos = Parse("");
  ASSERT_TRUE(autos.ok()) << autos.status();
  ASSERT_TRUE(autos->has_value());
  EXPECT_EQ((*autos)->choice, OpenAiTools::Choice::kAuto);
  ASSERT_EQ((*autos)->tools.size(), 2u);
  EXPECT_EQ((*autos)->tools[1].parameters, nlohmann::ordered_json({{"type", "object"}}));
  // Key order kept for the template: "description" before "parameters".
  EXPECT_LT((*autos)->tools_json.dump().find("description"),
            (*autos)->tools_json.dump().find("parameters"));
  EXPECT_EQ((*Parse(R"(, "tool_choice": "none")"))->choice, OpenAiTools::Choice::kNone);
  EXPECT_EQ((*Parse(R"(, "tool_choice": "required")"))->choice, OpenAiTools::Choice::kRequired);
  auto named = Parse(R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ((*named)->choice, OpenAiTools::Choice::kNamed);
  EXPECT_EQ((*named)->named, "get_time");
  // No tools: nothing, unless a call is required.
  const std::string none = R"({"tool_choice": "auto", "tools": []})";
  EXPECT_FALSE(ParseOpenAiTools(Json::parse(none), none)->has_value());
}

TEST(OpenAiToolsTest, BadToolsAre400NamingTheField) {
  const std::string required = R"({"tool_choice": "required"})";
  EXPECT_EQ(Param(ParseOpenAiTools(Json::parse(required), required).status()), "tool_choice");
  EXPECT_EQ(
      Param(Parse(R"(, "tool_choice": {"type": "function", "function": {"name": "x"}})").status()),
      "tool_choice");
  EXPECT_EQ(Param(Parse(R"(, "tool_choice": "sometimes")").status()), "tool_choice");
  const std::string bad_schema = R"({"tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "patternProperties": {}}}}]})";
  const absl::Status s = ParseOpenAiTools(Json::parse(bad_schema), bad_schema).status();
  EXPECT_EQ(Param(s), "tools[0].function.parameters");
  EXPECT_THAT(s.message(), HasSubstr("unsupported keyword 'patternProperties'"));
  const std::string twice = R"({"tools": [{"type": "function", "function": {"name": "f"}},
      {"type": "function", "function": {"name": "f"}}]})";
  EXPECT_EQ(Param(ParseOpenAiTools(Json::parse(twice), twice).status()), "tools[1].function.name");
  const std::string no_name = R"({"tools": [{"type": "function", "function": {}}]})";
  EXPECT_EQ(Param(ParseOpenAiTools(Json::parse(no_name), no_name).status()),
            "tools[0].function.name");
}

TEST(OpenAiToolsTest, ForcedCallGrammarsParse) {
  for (const char* choice :
       {R"(, "tool_choice": "required")",
        R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"}) {
    auto tools = Parse(choice);
    ASSERT_TRUE(tools.ok()) << tools.status();
    for (const ToolCallFormat f :
         {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kMistral}) {
      absl::StatusOr<std::string> g = ToolCallGrammar(**tools, f);
      ASSERT_TRUE(g.ok()) << g.status();
      EXPECT_TRUE(ParseGbnf(*g).ok()) << ParseGbnf(*g).status() << "\n" << *g;
      EXPECT_THAT(*g, HasSubstr("get_weather"));
      // Named: only that function can be called.
      EXPECT_EQ(g->find("get_time") != std::string::npos,
                std::string(choice).find("required") != std::string::npos);
    }
  }
}

TEST(OpenAiToolsTest, PicksTheFormatByTheTemplate) {
  EXPECT_EQ(ToolCallFormatFor("{{ '[TOOL_CALLS]' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(ToolCallFormatFor("{{- '<|python_tag|>' }} {{ tools }}"), ToolCallFormat::kLlama3);
  EXPECT_EQ(ToolCallFormatFor("<tool_call>{{ tools }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(ToolCallFormatFor("{{ messages }}"), ToolCallFormat::kHermes);
  EXPECT_TRUE(TemplateRendersTools("{% if tools %}x{% endif %}"));
  EXPECT_FALSE(TemplateRendersTools("{% for m in messages %}{{ m.content }}{% endfor %}"));
}

TEST(OpenAiToolsTest, ParsesHermesCalls) {
  const ParsedToolOutput out = ParseToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
      "\"arguments\": {}}\n</tool_call>",
      ToolCallFormat::kHermes);
  EXPECT_EQ(out.content, "Let me check.");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(out.calls[0].arguments), Json::parse(R"({"city": "Paris", "unit": "c"})"));
  EXPECT_EQ(out.calls[1].arguments, "{}");
  // A block that is not a call stays text.
  const ParsedToolOutput broken =
      ParseToolCalls("<tool_call>\n{\"name\": 3}\n</tool_call>", ToolCallFormat::kHermes);
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.content, "<tool_call>\n{\"name\": 3}\n</tool_call>");
  EXPECT_EQ(ParseToolCalls(" plain ", ToolCallFormat::kHermes).content, "plain");
}

TEST(OpenAiToolsTest, ParsesLlama3AndMistralCalls) {
  ParsedToolOutput l =
      ParseToolCalls("<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}",
                     ToolCallFormat::kLlama3);
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].name, "get_time");
  EXPECT_EQ(l.calls[0].arguments, R"({"tz":"UTC"})");
  l = ParseToolCalls(R"({"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}})",
                     ToolCallFormat::kLlama3);
  ASSERT_EQ(l.calls.size(), 2u);
  EXPECT_EQ(l.calls[1].name, "b");
  EXPECT_TRUE(ParseToolCalls("{not json", ToolCallFormat::kLlama3).calls.empty());
  ParsedToolOutput m = ParseToolCalls(
      R"(Sure [TOOL_CALLS][{"name": "a", "arguments": {"k": [1]}}, {"name": "b", "arguments": {}}])",
      ToolCallFormat::kMistral);
  ASSERT_EQ(m.calls.size(), 2u);
  EXPECT_EQ(m.content, "Sure");
  EXPECT_EQ(m.calls[0].arguments, R"({"k":[1]})");
  // A forced Mistral call (no marker: it is a control token) parses too.
  m = ParseToolCalls(R"([{"name": "a", "arguments": {}}])", ToolCallFormat::kMistral);
  ASSERT_EQ(m.calls.size(), 1u);
}

TEST(OpenAiToolsTest, StreamingHoldsBackFromWhereACallMayStart) {
  EXPECT_EQ(ToolCallStart("Hello there", ToolCallFormat::kHermes), 11u);
  EXPECT_EQ(ToolCallStart("Hello <tool", ToolCallFormat::kHermes), 6u);
  EXPECT_EQ(ToolCallStart("Hi <tool_call>\n{", ToolCallFormat::kHermes), 3u);
  EXPECT_EQ(ToolCallStart("a < b", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(ToolCallStart("x [TOOL", ToolCallFormat::kMistral), 2u);
  EXPECT_EQ(ToolCallStart("  {\"name\"", ToolCallFormat::kLlama3), 2u);
  EXPECT_EQ(ToolCallStart("The answer", ToolCallFormat::kLlama3), 10u);
}

TEST(OpenAiToolsTest, HermesFallbackTexts) {
  const std::string prompt = HermesToolSystemPrompt(
      nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])"));
  EXPECT_THAT(prompt, HasSubstr("<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"));
  EXPECT_THAT(prompt, HasSubstr("<tool_call>"));
  // Arguments come as a JSON string in OpenAI's messages; the text has them as an object, name
  // first, and parses back to the same call.
  const std::string text = HermesToolCallsText(Json::parse(
      R"([{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}])"));
  EXPECT_EQ(text, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n</tool_call>");
  const ParsedToolOutput back = ParseToolCalls(text, ToolCallFormat::kHermes);
  ASSERT_EQ(back.calls.size(), 1u);
  EXPECT_EQ(back.calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(HermesToolResponseText("22 C"), "<tool_response>\n22 C\n</tool_response>");
}

}  // namespace
}  // namespace tandem
