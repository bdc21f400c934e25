#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "router/http/openai_response.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

CompletionMeta Meta(OpenAiEndpoint endpoint) {
  return CompletionMeta{endpoint, CompletionId(endpoint, "req-1"), 1700000000, "smol"};
}

TEST(OpenAiResponseTest, ChatCompletionBody) {
  const Json body = Json::parse(
      CompletionBody(Meta(OpenAiEndpoint::kChatCompletions), "Paris.", "stop", {12, 3}));
  EXPECT_EQ(body["id"], "chatcmpl-req-1");
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "smol");
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Paris.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
  EXPECT_EQ(body["usage"]["total_tokens"], 15);
}

TEST(OpenAiResponseTest, TextCompletionBody) {
  const Json body =
      Json::parse(CompletionBody(Meta(OpenAiEndpoint::kCompletions), " upon", "length", {2, 1}));
  EXPECT_EQ(body["id"], "cmpl-req-1");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], " upon");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
}

TEST(OpenAiResponseTest, ChatChunks) {
  const CompletionMeta meta = Meta(OpenAiEndpoint::kChatCompletions);
  const Json first = Json::parse(ChunkBody(meta, "", /*role=*/true, "", /*usage_field=*/false));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  const Json content = Json::parse(ChunkBody(meta, "Par", false, "", /*usage_field=*/true));
  EXPECT_FALSE(content["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(content["choices"][0]["delta"]["content"], "Par");
  EXPECT_TRUE(content.contains("usage"));
  EXPECT_TRUE(content["usage"].is_null());
  const Json last = Json::parse(ChunkBody(meta, "", false, "stop", false));
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const Json usage = Json::parse(UsageChunkBody(meta, {5, 2}));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
}

TEST(OpenAiResponseTest, CompletionChunkHasText) {
  const Json chunk =
      Json::parse(ChunkBody(Meta(OpenAiEndpoint::kCompletions), "x", false, "", false));
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["choices"][0]["text"], "x");
}

TEST(OpenAiResponseTest, InvalidUtf8IsReplacedNotFatal) {
  const Json body =
      Json::parse(CompletionBody(Meta(OpenAiEndpoint::kCompletions), "a\xff", "stop", {1, 1}));
  EXPECT_EQ(body["choices"][0]["text"], "a\xEF\xBF\xBD");
}

TEST(OpenAiResponseTest, SseFraming) {
  EXPECT_EQ(SseEvent("{}"), "data: {}\n\n");
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAiResponseTest, ModelsList) {
  const Json body = Json::parse(ModelsBody("smol", 5));
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0]["id"], "smol");
  EXPECT_EQ(body["data"][0]["object"], "model");
}

TEST(OpenAiResponseTest, StatusCodesMapToHttp) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnknown), 500);
}

TEST(OpenAiResponseTest, ErrorObjectCarriesParam) {
  const Json with_param = Json::parse(ErrorBody(OpenAiInvalidParam("n", "'n' must be 1 (got 2)")));
  EXPECT_EQ(with_param["error"]["message"], "'n' must be 1 (got 2)");
  EXPECT_EQ(with_param["error"]["type"], "invalid_request_error");
  EXPECT_EQ(with_param["error"]["param"], "n");
  EXPECT_EQ(with_param["error"]["code"], 400);
  const Json not_found = Json::parse(ErrorBody(absl::NotFoundError("model 'x' is not served")));
  EXPECT_TRUE(not_found["error"]["param"].is_null());
  EXPECT_EQ(not_found["error"]["code"], 404);
  const Json busy = Json::parse(ErrorBody(absl::UnavailableError("no healthy decode node")));
  EXPECT_EQ(busy["error"]["type"], "service_unavailable_error");
  EXPECT_EQ(busy["error"]["code"], 503);
}

}  // namespace
}  // namespace tandem
