#include <gtest/gtest.h>

#include <string>

#include "router/http/openai_request.h"

namespace tandem {
namespace {

using Kind = PromptInput::Kind;

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
        BadCase{"n2", kChat, R"({"messages": [], "n": 2})", "n", "'n' must be 1"},
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
        BadCase{"logprobs", kCmpl, R"({"prompt": "a", "logprobs": 2})", "logprobs",
                "not supported"},
        BadCase{"echo", kCmpl, R"({"prompt": "a", "echo": true})", "echo", "not supported"},
        BadCase{"penalty", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 0.5})",
                "presence_penalty", "not supported"},
        BadCase{"model_type", kChat, R"({"model": 3, "messages": []})", "model", "string"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tandem
