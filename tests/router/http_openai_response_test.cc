#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

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
  const Json body = Json::parse(ModelsBody("smol", 5, 8192));
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0]["id"], "smol");
  EXPECT_EQ(body["data"][0]["object"], "model");
  EXPECT_EQ(body["data"][0]["max_model_len"], 8192);
}

TEST(OpenAiResponseTest, UsageHasCachedTokensAndBodiesTheFingerprint) {
  CompletionMeta meta = Meta(OpenAiEndpoint::kChatCompletions);
  const Json without = Json::parse(CompletionBody(meta, "x", "stop", {12, 3, 8}));
  EXPECT_FALSE(without.contains("system_fingerprint"));
  EXPECT_EQ(without["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  meta.system_fingerprint = "fp_0123456789abcdef";
  const Json whole = Json::parse(CompletionBody(meta, "x", "stop", {12, 3, 8}));
  EXPECT_EQ(whole["system_fingerprint"], "fp_0123456789abcdef");
  const Json chunk = Json::parse(ChunkBody(meta, "x", false, "", false));
  EXPECT_EQ(chunk["system_fingerprint"], "fp_0123456789abcdef");
  const Json usage = Json::parse(UsageChunkBody(meta, {5, 2, 4}));
  EXPECT_EQ(usage["system_fingerprint"], "fp_0123456789abcdef");
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(OpenAiResponseTest, SystemFingerprintIsStableAndFollowsModelAndVersion) {
  const std::vector<std::string> vocab = {"a", "b", "ab"};
  const std::string fp = SystemFingerprint("0.1.0", "smol", 8192, vocab);
  EXPECT_EQ(fp.size(), 3u + 16u);
  EXPECT_EQ(fp.substr(0, 3), "fp_");
  EXPECT_EQ(SystemFingerprint("0.1.0", "smol", 8192, vocab), fp);
  EXPECT_NE(SystemFingerprint("0.1.1", "smol", 8192, vocab), fp);
  EXPECT_NE(SystemFingerprint("0.1.0", "smol2", 8192, vocab), fp);
  EXPECT_NE(SystemFingerprint("0.1.0", "smol", 4096, vocab), fp);
  EXPECT_NE(SystemFingerprint("0.1.0", "smol", 8192, {"a", "b", "ba"}), fp);
  // Moving a boundary between pieces changes it.
  EXPECT_NE(SystemFingerprint("0.1.0", "smol", 8192, {"a", "ba", "b"}),
            SystemFingerprint("0.1.0", "smol", 8192, {"ab", "a", "b"}));
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

// The rule: `code` is the HTTP status and `type` follows it, for every error the API sends.
TEST(OpenAiResponseTest, ErrorCodeIsTheHttpStatusEverywhere) {
  const std::pair<int, const char*> cases[] = {
      {400, "invalid_request_error"}, {401, "authentication_error"},     {404, "not_found_error"},
      {405, "invalid_request_error"}, {413, "invalid_request_error"},    {429, "rate_limit_error"},
      {500, "internal_error"},        {503, "service_unavailable_error"}};
  for (const auto& [status, type] : cases) {
    const Json body = Json::parse(ErrorBody(status, "m"));
    EXPECT_EQ(body["error"]["code"], status);
    EXPECT_EQ(body["error"]["type"], type) << status;
    EXPECT_EQ(body["error"]["message"], "m");
    EXPECT_TRUE(body["error"]["param"].is_null());
  }
  for (const absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kUnauthenticated,
        absl::StatusCode::kCancelled, absl::StatusCode::kUnimplemented}) {
    const Json body = Json::parse(ErrorBody(absl::Status(code, "m")));
    EXPECT_EQ(body["error"]["code"], HttpStatusFor(code));
    EXPECT_EQ(body["error"]["type"], ErrorType(HttpStatusFor(code)));
  }
}

}  // namespace
}  // namespace tandem
