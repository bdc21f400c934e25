#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/regex.h"
#include "nlohmann/json.hpp"
#include "router/http/openai_request.h"

namespace tandem {
namespace {

using Kind = PromptInput::Kind;
using Json = nlohmann::json;

absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body);
}
absl::StatusOr<OpenAiRequest> Completion(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body);
}
std::string Param(const absl::Status& s) {
  const auto p = s.GetPayload(kOpenAiParamPayload);
  return p.has_value() ? std::string(*p) : "<none>";
}

TEST(OpenAiRequestTest, ChatWithEveryParameter) {
  auto r = Chat(R"({"model": "m", "messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
      "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 11,
      "stop": ["\n", ""], "ignore_eos": true, "n": 1, "stream": true,
      "stream_options": {"include_usage": true}, "user": "u", "some_future_field": {"x": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompt.kind, Kind::kChat);
  ASSERT_EQ(r->prompt.chat.size(), 2u);
  EXPECT_EQ(r->prompt.chat[1].role, "user");
  EXPECT_EQ(r->prompt.chat[1].content, "hi there");
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_EQ(r->seed, 11u);
  EXPECT_EQ(r->stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r->ignore_eos);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->unknown_fields, std::vector<std::string>{"some_future_field"});
}

TEST(OpenAiRequestTest, NChoicesAndBestOfEqualToN) {
  auto r = Completion(R"({"prompt": "x", "n": 3, "best_of": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 3);
  auto one = Chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->n, 1);
}

TEST(OpenAiRequestTest, VllmFieldsTandemHonours) {
  auto r = Completion(R"({"prompt": "x", "add_special_tokens": false,
      "include_stop_str_in_output": true, "truncate_prompt_tokens": 5, "request_id": "abc"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->add_special_tokens, false);
  EXPECT_TRUE(r->include_stop_str_in_output);
  EXPECT_EQ(r->truncate_prompt_tokens, 5);
  EXPECT_EQ(r->request_id, "abc");
  auto whole = Completion(R"({"prompt": "x", "truncate_prompt_tokens": -1})");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->truncate_prompt_tokens, -1);
  auto defaults = Completion(R"({"prompt": "x"})");
  ASSERT_TRUE(defaults.ok());
  EXPECT_FALSE(defaults->add_special_tokens.has_value());
  EXPECT_FALSE(defaults->include_stop_str_in_output);
  EXPECT_FALSE(defaults->truncate_prompt_tokens.has_value());
  EXPECT_FALSE(defaults->request_id.has_value());
  EXPECT_TRUE(defaults->unknown_fields.empty());
}

// A known field at the value that asks for nothing is accepted, and is not "unknown".
TEST(OpenAiRequestTest, KnownFieldsAtTheirDefaultAreAccepted) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": "x", "name": null}],
      "response_format": {"type": "text"}, "tools": [], "tool_choice": "none",
      "functions": null, "function_call": "auto", "parallel_tool_calls": true,
      "min_p": 0, "repetition_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0.0,
      "logit_bias": {}, "min_tokens": 0, "stop_token_ids": [], "logprobs": false,
      "top_logprobs": null, "echo": false, "best_of": 1, "skip_special_tokens": true,
      "spaces_between_special_tokens": false, "add_generation_prompt": true,
      "continue_final_message": false, "use_beam_search": false, "length_penalty": 1.0,
      "guided_json": null, "user": "u", "metadata": {"k": "v"}, "store": false,
      "modalities": ["text"], "service_tier": "auto", "priority": 0, "verbosity": "medium",
      "stream_options": {"include_obfuscation": true, "continuous_usage_stats": false}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->unknown_fields.empty()) << r->unknown_fields.front();
}

// Each structured-output field becomes the GBNF the nodes decode under; the grammar accepts what
// the field asks for (checked on the grammar's text: the engine's own tests run it).
TEST(OpenAiRequestTest, StructuredOutputBecomesAGrammar) {
  auto text = Chat(R"({"messages": [], "response_format": {"type": "text"}})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->sampling.grammar, "");
  auto object = Chat(R"({"messages": [], "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->sampling.grammar, JsonObjectGbnf());
  // Properties keep the body's order (zeta before alpha), not nlohmann::json's sorted one.
  const char* schema = R"({"type": "object", "properties": {"zeta": {"type": "integer"},
      "alpha": {"type": "string"}}, "required": ["zeta", "alpha"], "additionalProperties": false})";
  auto with_schema =
      Chat(absl::StrCat(R"({"messages": [], "response_format": {"type": "json_schema",
          "json_schema": {"name": "t", "strict": true, "schema": )",
                        schema, "}}}"));
  ASSERT_TRUE(with_schema.ok()) << with_schema.status();
  EXPECT_EQ(with_schema->sampling.grammar, *JsonSchemaTextToGbnf(schema));
  EXPECT_NE(with_schema->sampling.grammar, *JsonSchemaToGbnf(Json::parse(schema)));  // sorted
  // vLLM's guided_json takes the schema as an object or as text: the same grammar.
  auto guided = Completion(absl::StrCat(R"({"prompt": "a", "guided_json": )", schema, "}"));
  ASSERT_TRUE(guided.ok()) << guided.status();
  EXPECT_EQ(guided->sampling.grammar, with_schema->sampling.grammar);
  auto guided_text =
      Completion(absl::StrCat(R"({"prompt": "a", "guided_json": )", Json(schema).dump(), "}"));
  ASSERT_TRUE(guided_text.ok()) << guided_text.status();
  EXPECT_EQ(guided_text->sampling.grammar, with_schema->sampling.grammar);
  auto regex = Completion(R"({"prompt": "a", "guided_regex": "[0-9]{3}"})");
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_EQ(regex->sampling.grammar, *RegexToGbnf("[0-9]{3}"));
  auto choice = Completion(R"({"prompt": "a", "guided_choice": ["yes", "no \"way\""]})");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->sampling.grammar,
            absl::StrCat("root ::= ", GbnfLiteral("yes"), " | ", GbnfLiteral("no \"way\""), "\n"));
  auto grammar = Completion(R"({"prompt": "a", "guided_grammar": "root ::= [a-z]+"})");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_EQ(grammar->sampling.grammar, "root ::= [a-z]+");
  // A backend name changes nothing (one engine).
  auto backend = Completion(R"({"prompt": "a", "guided_decoding_backend": "xgrammar"})");
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ(backend->sampling.grammar, "");
}

TEST(OpenAiRequestTest, UnknownFieldsAreListedNotRefused) {
  auto r = Chat(R"({"zeta": 1, "messages": [{"role": "user", "content": "x", "mood": "calm"}],
      "alpha": {"nested": true}, "stream_options": {"include_usage": true, "extra": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->unknown_fields,
            (std::vector<std::string>{"alpha", "zeta", "messages[].mood", "stream_options.extra"}));
  // A chat-only field sent to /v1/completions is unknown there (and so not refused).
  auto c = Completion(R"({"prompt": "x", "tools": [{"type": "function"}]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->unknown_fields, std::vector<std::string>{"tools"});
}

TEST(OpenAiRequestTest, DefaultsFollowOpenAi) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "");
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_FLOAT_EQ(r->sampling.temperature, 1.f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 1.f);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_FALSE(r->seed.has_value());
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->include_usage);
  EXPECT_TRUE(r->stop.empty());
}

TEST(OpenAiRequestTest, TopKMinusOneMeansDisabled) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "top_k": -1})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.top_k, 0);
}

TEST(OpenAiRequestTest, CompletionPromptForms) {
  auto text = Completion(R"({"prompt": "Once", "max_tokens": 3, "stop": "."})");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->prompt.kind, Kind::kText);
  EXPECT_EQ(text->prompt.text, "Once");
  EXPECT_EQ(text->stop, std::vector<std::string>{"."});
  auto ids = Completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->prompt.kind, Kind::kTokenIds);
  EXPECT_EQ(ids->prompt.token_ids, (std::vector<int32_t>{1, 2, 3}));
  auto one_text = Completion(R"({"prompt": ["Once"]})");
  ASSERT_TRUE(one_text.ok());
  EXPECT_EQ(one_text->prompt.text, "Once");
  auto one_ids = Completion(R"({"prompt": [[4, 5]]})");
  ASSERT_TRUE(one_ids.ok());
  EXPECT_EQ(one_ids->prompt.token_ids, (std::vector<int32_t>{4, 5}));
}

TEST(OpenAiRequestTest, MaxCompletionTokensWinsOverMaxTokens) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                    "max_completion_tokens": 9})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->max_tokens, 9);
}

TEST(OpenAiRequestTest, RangeChecksAreLeftToTheRouter) {
  // The gRPC validation answers these, with the same messages for both APIs.
  auto r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0,
                    "temperature": -1, "top_p": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_tokens, 0);
  EXPECT_FLOAT_EQ(r->sampling.temperature, -1.f);
}

struct BadCase {
  const char* name;
  OpenAiEndpoint endpoint;
  const char* body;
  const char* param;      // expected payload, "<none>" for none
  const char* substring;  // expected in the message
};

class OpenAiRequestErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(OpenAiRequestErrorTest, InvalidArgumentNamingTheField) {
  const BadCase& c = GetParam();
  auto r = ParseOpenAiRequest(c.endpoint, c.body);
  ASSERT_FALSE(r.ok()) << c.body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Param(r.status()), c.param);
  EXPECT_NE(r.status().message().find(c.substring), std::string::npos) << r.status();
}

constexpr OpenAiEndpoint kChat = OpenAiEndpoint::kChatCompletions;
constexpr OpenAiEndpoint kCmpl = OpenAiEndpoint::kCompletions;

INSTANTIATE_TEST_SUITE_P(
    Cases, OpenAiRequestErrorTest,
    ::testing::Values(
        BadCase{"not_json", kChat, "{", "<none>", "not valid JSON"},
        BadCase{"not_object", kChat, "[1]", "<none>", "JSON object"},
        BadCase{"n0", kChat, R"({"messages": [], "n": 0})", "n", "'n' must be in [1, 64]"},
        BadCase{"n65", kChat, R"({"messages": [], "n": 65})", "n", "(got 65)"},
        BadCase{"n_string", kChat, R"({"messages": [], "n": "1"})", "n", "integer"},
        BadCase{"no_messages", kChat, R"({"model": "m"})", "messages", "'messages'"},
        BadCase{"role_missing", kChat, R"({"messages": [{"content": "x"}]})", "messages[0].role",
                "must be a string"},
        BadCase{"image_part", kChat,
                R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                "messages[0].content", "parts"},
        BadCase{"no_prompt", kCmpl, R"({"max_tokens": 1})", "prompt", "required"},
        BadCase{"batch", kCmpl, R"({"prompt": ["a", "b"]})", "prompt", "only one prompt"},
        BadCase{"float_ids", kCmpl, R"({"prompt": [1.5]})", "prompt", "integers"},
        BadCase{"max_tokens_type", kCmpl, R"({"prompt": "a", "max_tokens": "5"})", "max_tokens",
                "integer"},
        BadCase{"temperature_type", kCmpl, R"({"prompt": "a", "temperature": "hot"})",
                "temperature", "number"},
        BadCase{"stop_type", kCmpl, R"({"prompt": "a", "stop": [1]})", "stop", "strings"},
        BadCase{"stream_type", kCmpl, R"({"prompt": "a", "stream": 1})", "stream", "boolean"},
        BadCase{"include_usage_type", kCmpl,
                R"({"prompt": "a", "stream_options": {"include_usage": "yes"}})",
                "stream_options.include_usage", "boolean"},
        BadCase{"logprobs", kCmpl, R"({"prompt": "a", "logprobs": 21})", "logprobs", "[0, 20]"},
        BadCase{"echo", kCmpl, R"({"prompt": "a", "echo": true})", "echo", "not supported"},
        BadCase{"model_type", kChat, R"({"model": 3, "messages": []})", "model", "string"},
        // Nothing silently ignored: a known field asking for what Tandem does not do.
        // Structured output: what the compiler cannot handle names the field and the keyword.
        BadCase{"json_format_type", kChat,
                R"({"messages": [], "response_format": {"type": "xml"}})", "response_format.type",
                "json_schema"},
        BadCase{"json_schema_completions", kCmpl,
                R"({"prompt": "a", "response_format": {"type": "json_schema"}})",
                "response_format.json_schema", "'schema'"},
        BadCase{"json_schema_keyword", kChat,
                R"({"messages": [], "response_format": {"type": "json_schema", "json_schema":
                    {"name": "t", "schema": {"type": "object", "properties": {"tags":
                    {"type": "object", "patternProperties": {"x": {}}}}}}}})",
                "response_format.json_schema.schema",
                "unsupported keyword 'patternProperties' at /properties/tags"},
        BadCase{"two_constraints", kCmpl,
                R"({"prompt": "a", "guided_regex": "a+", "guided_choice": ["a"]})", "guided_choice",
                "only one of"},
        BadCase{"guided_regex_lookahead", kCmpl, R"({"prompt": "a", "guided_regex": "(?=a)a"})",
                "guided_regex", "regex:"},
        BadCase{"guided_choice_type", kCmpl, R"({"prompt": "a", "guided_choice": [1]})",
                "guided_choice", "strings"},
        BadCase{"guided_grammar_syntax", kCmpl,
                R"({"prompt": "a", "guided_grammar": "root ::= ("})", "guided_grammar",
                "gbnf: line 1"},
        BadCase{"whitespace_pattern", kCmpl,
                R"({"prompt": "a", "guided_whitespace_pattern": " *"})",
                "guided_whitespace_pattern", "fixed"},
        BadCase{"tools", kChat,
                R"({"messages": [], "tools": [{"type": "function", "function": {"name": ""}}]})",
                "tools[0].function.name", "must be a string"},
        BadCase{"tool_choice", kChat, R"({"messages": [], "tool_choice": "required"})",
                "tool_choice", "requires 'tools'"},
        BadCase{"tool_choice_and_format", kChat,
                R"({"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}],
                    "tool_choice": "required", "response_format": {"type": "json_object"}})",
                "tool_choice", "also constrains"},
        BadCase{"functions", kChat, R"({"messages": [], "functions": [{"name": "f"}]})",
                "functions", "use tools"},
        BadCase{"function_call", kChat, R"({"messages": [], "function_call": {"name": "f"}})",
                "function_call", "use tools"},
        BadCase{"guided_json", kCmpl, R"({"prompt": "a", "guided_json": {"not": {}}})",
                "guided_json", "unsupported keyword 'not'"},
        BadCase{"chat_logprobs", kChat, R"({"messages": [], "logprobs": 1})", "logprobs",
                "boolean"},
        BadCase{"completion_logprobs_bool", kCmpl, R"({"prompt": "a", "logprobs": true})",
                "logprobs", "[0, 20]"},
        BadCase{"top_logprobs", kChat, R"({"messages": [], "top_logprobs": 3})", "top_logprobs",
                "needs 'logprobs'"},
        BadCase{"top_logprobs_range", kChat,
                R"({"messages": [], "logprobs": true, "top_logprobs": 21})", "top_logprobs",
                "[0, 20]"},
        BadCase{"best_of", kCmpl, R"({"prompt": "a", "best_of": 2})", "best_of",
                "unless it equals n"},
        BadCase{"best_of_over_n", kCmpl, R"({"prompt": "a", "n": 2, "best_of": 3})", "best_of",
                "unless it equals n"},
        BadCase{"suffix", kCmpl, R"({"prompt": "a", "suffix": "end"})", "suffix", "not supported"},
        BadCase{"add_generation_prompt", kChat,
                R"({"messages": [], "add_generation_prompt": "no"})", "add_generation_prompt",
                "must be a boolean"},
        BadCase{"continue_final_message", kChat,
                R"({"messages": [], "continue_final_message": true})", "continue_final_message",
                "cannot both be true"},
        BadCase{"skip_special_tokens", kCmpl, R"({"prompt": "a", "skip_special_tokens": false})",
                "skip_special_tokens", "must be true"},
        BadCase{"beam", kCmpl, R"({"prompt": "a", "use_beam_search": true})", "use_beam_search",
                "beam search"},
        BadCase{"store", kChat, R"({"messages": [], "store": true})", "store", "not stored"},
        BadCase{"message_name", kChat,
                R"({"messages": [{"role": "user", "content": "x", "name": "bob"}]})",
                "messages[0].name", "not supported"},
        BadCase{"message_tool_calls", kChat,
                R"({"messages": [{"role": "assistant", "content": null,
                    "tool_calls": {"id": "1"}}]})",
                "messages[0].tool_calls", "must be an array"},
        BadCase{"continuous_usage_stats", kChat,
                R"({"messages": [], "stream_options": {"continuous_usage_stats": true}})",
                "stream_options.continuous_usage_stats", "not supported"},
        BadCase{"truncate_zero", kCmpl, R"({"prompt": "a", "truncate_prompt_tokens": 0})",
                "truncate_prompt_tokens", ">= 1"},
        BadCase{"add_special_tokens_type", kCmpl, R"({"prompt": "a", "add_special_tokens": 1})",
                "add_special_tokens", "boolean"},
        BadCase{"request_id_type", kCmpl, R"({"prompt": "a", "request_id": 7})", "request_id",
                "string"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tandem
