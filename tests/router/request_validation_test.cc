#include "router/request_validation.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace tandem {
namespace {

const ModelLimits kLimits{"smol", /*vocab_size=*/100, /*context_length=*/32};

void ExpectInvalid(const absl::Status& s, const std::string& message) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), message);
}

TEST(ValidateModelNameTest, EmptyOrServedNamePasses) {
  EXPECT_TRUE(ValidateModelName("", kLimits).ok());
  EXPECT_TRUE(ValidateModelName("smol", kLimits).ok());
}

TEST(ValidateModelNameTest, UnknownModelIsNotFoundNamingTheServedOne) {
  const absl::Status s = ValidateModelName("llama-70b", kLimits);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "model 'llama-70b' is not served here; this router serves 'smol'");
}

TEST(ValidateSamplingForModelTest, IdsInTheVocabularyAndMinTokensWithinTheBudget) {
  SamplingParams s;
  s.logit_bias = {{0, 1.f}, {99, -100.f}};
  s.min_tokens = 8;
  EXPECT_TRUE(ValidateSamplingForModel(s, {0, 99}, 8, kLimits).ok());
  ExpectInvalid(ValidateSamplingForModel(s, {100}, 8, kLimits),
                "stop_token_ids: token id 100 is out of vocabulary (size 100)");
  ExpectInvalid(ValidateSamplingForModel(s, {-1}, 8, kLimits),
                "stop_token_ids: token id -1 is out of vocabulary (size 100)");
  ExpectInvalid(ValidateSamplingForModel(s, {}, 7, kLimits),
                "min_tokens (8) must be <= max_tokens (7)");
  s.logit_bias = {{100, 1.f}};
  ExpectInvalid(ValidateSamplingForModel(s, {}, 8, kLimits),
                "logit_bias token id 100 is out of vocabulary (size 100)");
}

TEST(ValidatePromptInputTest, EachEmptyShape) {
  PromptInput p;
  ExpectInvalid(ValidatePromptInput(p), "no prompt: set one of text, token_ids or chat");
  p.kind = PromptInput::Kind::kText;
  ExpectInvalid(ValidatePromptInput(p), "prompt text is empty");
  p.kind = PromptInput::Kind::kTokenIds;
  ExpectInvalid(ValidatePromptInput(p), "prompt token_ids is empty");
  p.kind = PromptInput::Kind::kChat;
  ExpectInvalid(ValidatePromptInput(p), "chat has no messages");
}

TEST(ValidatePromptInputTest, ChatRoles) {
  PromptInput p;
  p.kind = PromptInput::Kind::kChat;
  p.chat = {{"system", "be brief"}, {"user", "hi"}, {"assistant", "hello"}};
  EXPECT_TRUE(ValidatePromptInput(p).ok());
  p.chat.push_back({"tool", "x"});  // a tool result (rendered by a template that renders tools)
  EXPECT_TRUE(ValidatePromptInput(p).ok());
  p.chat.push_back({"function", "x"});
  ExpectInvalid(ValidatePromptInput(p),
                "chat message 4 has role 'function' (valid: system, user, assistant, tool)");
  p.chat.pop_back();
  p.chat.pop_back();
  p.continue_final_message = true;  // add_generation_prompt still true
  ExpectInvalid(ValidatePromptInput(p),
                "chat.continue_final_message and chat.add_generation_prompt cannot both be true");
  p.add_generation_prompt = false;
  EXPECT_TRUE(ValidatePromptInput(p).ok());
}

TEST(ValidatePromptInputTest, NonEmptyTextAndIdsPass) {
  PromptInput text;
  text.kind = PromptInput::Kind::kText;
  text.text = "x";
  EXPECT_TRUE(ValidatePromptInput(text).ok());
  PromptInput ids;
  ids.kind = PromptInput::Kind::kTokenIds;
  ids.token_ids = {5};
  EXPECT_TRUE(ValidatePromptInput(ids).ok());
}

TEST(ValidateMaxTokensTest, MustBePositive) {
  EXPECT_TRUE(ValidateMaxTokens(1).ok());
  ExpectInvalid(ValidateMaxTokens(0), "max_tokens must be >= 1 (got 0)");
  ExpectInvalid(ValidateMaxTokens(-3), "max_tokens must be >= 1 (got -3)");
}

SamplingParams Sampling(float temperature, int top_k, float top_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = 7;
  return p;
}

// The router checks sampling values with the engines' ValidateSamplingParams; an explicit
// top_p of 0 is an error (proto presence tells it from an unset one, tests/proto).
TEST(ValidateSamplingTest, BadValues) {
  EXPECT_TRUE(ValidateSamplingParams(Sampling(0.7f, 40, 0.5f)).ok());
  ExpectInvalid(ValidateSamplingParams(Sampling(-0.5f, 0, 1.f)),
                "temperature must be a finite number >= 0 (got -0.5)");
  ExpectInvalid(ValidateSamplingParams(Sampling(std::nanf(""), 0, 1.f)),
                "temperature must be a finite number >= 0 (got nan)");
  ExpectInvalid(ValidateSamplingParams(Sampling(std::numeric_limits<float>::infinity(), 0, 1.f)),
                "temperature must be a finite number >= 0 (got inf)");
  ExpectInvalid(ValidateSamplingParams(Sampling(1.f, -1, 1.f)), "top_k must be >= 0 (got -1)");
  ExpectInvalid(ValidateSamplingParams(Sampling(1.f, 0, 0.f)), "top_p must be in (0, 1] (got 0)");
  ExpectInvalid(ValidateSamplingParams(Sampling(1.f, 0, 1.5f)),
                "top_p must be in (0, 1] (got 1.5)");
  ExpectInvalid(ValidateSamplingParams(Sampling(1.f, 0, -0.1f)),
                "top_p must be in (0, 1] (got -0.1)");
  ExpectInvalid(ValidateSamplingParams(Sampling(1.f, 0, std::nanf(""))),
                "top_p must be in (0, 1] (got nan)");
}

TEST(ValidatePromptIdsTest, RangeAndEmptiness) {
  EXPECT_TRUE(ValidatePromptIds({0, 50, 99}, kLimits).ok());
  ExpectInvalid(ValidatePromptIds({}, kLimits), "prompt is empty after tokenisation");
  ExpectInvalid(ValidatePromptIds({1, 2, 100}, kLimits),
                "prompt token id 100 at position 2 is outside the vocabulary [0, 100)");
  ExpectInvalid(ValidatePromptIds({-1}, kLimits),
                "prompt token id -1 at position 0 is outside the vocabulary [0, 100)");
}

TEST(ValidateLengthsTest, PromptAndBudgetMustFitTheContext) {
  EXPECT_TRUE(ValidateLengths(31, 1, kLimits).ok());
  EXPECT_TRUE(ValidateLengths(1, 31, kLimits).ok());
  ExpectInvalid(ValidateLengths(33, 1, kLimits),
                "prompt has 33 tokens, more than the model's context length 32");
  ExpectInvalid(ValidateLengths(32, 1, kLimits),
                "prompt (32 tokens) + max_tokens (1) = 33 exceeds the model's context length 32");
  ExpectInvalid(ValidateLengths(10, 23, kLimits),
                "prompt (10 tokens) + max_tokens (23) = 33 exceeds the model's context length 32");
}

}  // namespace
}  // namespace tandem
