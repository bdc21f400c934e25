// The OpenAI sampler fields (router/http/openai_sampling.h) through ParseOpenAiRequest.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "router/http/openai_request.h"

namespace tandem {
namespace {

absl::StatusOr<OpenAiRequest> Completion(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body);
}
std::string Param(const absl::Status& s) {
  const auto p = s.GetPayload(kOpenAiParamPayload);
  return p.has_value() ? std::string(*p) : "<none>";
}

TEST(OpenAiSamplingTest, EveryFieldReachesTheSamplingParams) {
  auto r = ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, R"({
      "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7,
      "min_p": 0.05, "repetition_penalty": 1.2, "presence_penalty": -0.5,
      "frequency_penalty": 1.5, "logit_bias": {"17": 3.5, "4": -1000, "9": 250},
      "min_tokens": 6, "stop_token_ids": [2, 0]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const SamplingParams& s = r->sampling;
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(s.presence_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, 1.5f);
  // Sorted by id; biases clamped to [-100, 100] as vLLM does.
  const std::vector<std::pair<int32_t, float>> bias = {{4, -100.f}, {9, 100.f}, {17, 3.5f}};
  EXPECT_EQ(s.logit_bias, bias);
  EXPECT_EQ(s.min_tokens, 6);
  EXPECT_EQ(r->stop_token_ids, (std::vector<int32_t>{2, 0}));
  EXPECT_TRUE(ValidateSamplingParams(s).ok());
}

TEST(OpenAiSamplingTest, AbsentOrNullFieldsAreOff) {
  auto r = Completion(R"({"prompt": "a", "min_p": null, "repetition_penalty": null,
                          "logit_bias": null, "stop_token_ids": null, "min_tokens": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sampling.min_p, 0.f);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.f);
  EXPECT_TRUE(r->sampling.logit_bias.empty());
  EXPECT_EQ(r->sampling.min_tokens, 0);
  EXPECT_TRUE(r->stop_token_ids.empty());
  EXPECT_FALSE(UsesPenalties(r->sampling));
}

// Ranges are the router's (ValidateSamplingParams names the field); the parser only reads them.
TEST(OpenAiSamplingTest, OutOfRangeValuesAreLeftToTheRouter) {
  auto r = Completion(R"({"prompt": "a", "repetition_penalty": 0, "min_p": 2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ValidateSamplingParams(r->sampling).code(), absl::StatusCode::kInvalidArgument);
}

TEST(OpenAiSamplingTest, TypeErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "a", "min_p": "0.1"})", "min_p"},
      {R"({"prompt": "a", "repetition_penalty": true})", "repetition_penalty"},
      {R"({"prompt": "a", "presence_penalty": [1]})", "presence_penalty"},
      {R"({"prompt": "a", "frequency_penalty": "x"})", "frequency_penalty"},
      {R"({"prompt": "a", "logit_bias": [1, 2]})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"hello": 1}})", "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"5": "up"}})", "logit_bias"},
      {R"({"prompt": "a", "min_tokens": 1.5})", "min_tokens"},
      {R"({"prompt": "a", "min_tokens": 99999999999})", "min_tokens"},
      {R"({"prompt": "a", "stop_token_ids": 5})", "stop_token_ids"},
      {R"({"prompt": "a", "stop_token_ids": ["5"]})", "stop_token_ids"},
  };
  for (const auto& [body, field] : cases) {
    auto r = Completion(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(Param(r.status()), field) << body;
  }
}

TEST(OpenAiSamplingTest, LogprobsPerEndpoint) {
  auto chat = [](const std::string& extra) {
    return ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions,
                              R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}");
  };
  EXPECT_EQ(chat("")->sampling.logprobs, -1);
  EXPECT_EQ(chat(R"(, "logprobs": false)")->sampling.logprobs, -1);
  EXPECT_EQ(chat(R"(, "logprobs": true)")->sampling.logprobs, 0);
  EXPECT_EQ(chat(R"(, "logprobs": true, "top_logprobs": 5)")->sampling.logprobs, 5);
  EXPECT_EQ(chat(R"(, "logprobs": false, "top_logprobs": 0)")->sampling.logprobs, -1);
  EXPECT_EQ(Completion(R"({"prompt": "a"})")->sampling.logprobs, -1);
  EXPECT_EQ(Completion(R"({"prompt": "a", "logprobs": 0})")->sampling.logprobs, 0);
  EXPECT_EQ(Completion(R"({"prompt": "a", "logprobs": 20})")->sampling.logprobs, 20);
  EXPECT_EQ(Param(Completion(R"({"prompt": "a", "logprobs": -1})").status()), "logprobs");
}

}  // namespace
}  // namespace tandem
