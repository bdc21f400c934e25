// The router's HTTP API (router/http/router_http.h) served by the real router library against
// fake prefill/decode gRPC nodes in this process (fake_nodes.h), driven with libcurl: streamed
// tokens, 429 for RESOURCE_EXHAUSTED, a stop string that cancels the decode call, and a client
// that leaves while no token comes (the connection watch must cancel the request well before the
// decode idle timeout). Every wait is bounded.
#include <curl/curl.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/prometheus_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/http/openai_prepare.h"
#include "router/http/openai_tokenize.h"
#include "router/http/router_http.h"
#include "router/router_server.h"
#include "serving/api_keys.h"
#include "tests/router/fake_nodes.h"
#include "tests/router/test_model.h"

namespace tandem::testing_router {
namespace {

using Json = nlohmann::json;
using testing::HasSubstr;
constexpr absl::Duration kWait = absl::Seconds(10);

struct HttpReply {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  std::string request_id;
  std::string provenance;  // the x-tandem-provenance header
};

// POSTs `json` (GETs when `json` is nullopt); `keep_going(body so far)` false makes the client
// hang up (abort the transfer). `extra_headers`: "Name: value" lines.
HttpReply Post(int port, const std::string& path, const std::optional<std::string>& json,
               std::function<bool(const std::string&)> keep_going = nullptr,
               long timeout_ms = 20000, const std::vector<std::string>& extra_headers = {}) {
  HttpReply reply;
  struct Ctx {
    HttpReply* reply;
    std::function<bool(const std::string&)>* keep_going;
  } ctx{&reply, &keep_going};
  CURL* curl = curl_easy_init();
  const std::string url = absl::StrCat("http://127.0.0.1:", port, path);
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  for (const std::string& h : extra_headers) headers = curl_slist_append(headers, h.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (json.has_value()) curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json->c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &ctx);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t, size_t n, void* p) -> size_t {
        auto* c = static_cast<Ctx*>(p);
        c->reply->body.append(data, n);
        if (*c->keep_going && !(*c->keep_going)(c->reply->body)) return 0;  // hang up
        return n;
      });
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply);
  curl_easy_setopt(
      curl, CURLOPT_HEADERFUNCTION, +[](char* data, size_t, size_t n, void* p) -> size_t {
        const std::string line(data, n);
        if (line.rfind("x-request-id:", 0) == 0) {
          static_cast<HttpReply*>(p)->request_id = std::string(absl::StripAsciiWhitespace(
              absl::string_view(line).substr(sizeof("x-request-id:") - 1)));
        }
        if (line.rfind("x-tandem-provenance:", 0) == 0) {
          static_cast<HttpReply*>(p)->provenance = std::string(absl::StripAsciiWhitespace(
              absl::string_view(line).substr(sizeof("x-tandem-provenance:") - 1)));
        }
        return n;
      });
  reply.code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return reply;
}

long GetStatus(int port, const std::string& path) {
  CURL* curl = curl_easy_init();
  const std::string url = absl::StrCat("http://127.0.0.1:", port, path);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char*, size_t, size_t n, void*) -> size_t { return n; });
  long status = 0;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  return status;
}

// The JSON of every `data:` event but [DONE]; `done` tells whether [DONE] came.
std::vector<Json> Events(const std::string& body, bool* done) {
  std::vector<Json> events;
  *done = false;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ")) continue;
    if (line == "[DONE]") {
      *done = true;
      continue;
    }
    events.push_back(Json::parse(line));
  }
  return events;
}

std::string StreamedText(const std::vector<Json>& events) {
  std::string text;
  for (const Json& e : events) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    text += e["choices"][0]["text"].get<std::string>();
  }
  return text;
}

// The router's log lines, captured (the log function runs on request threads).
struct LogLines {
  absl::Mutex mu;
  std::vector<std::string> lines ABSL_GUARDED_BY(mu);
  int Count(absl::string_view needle) {
    absl::MutexLock lock(&mu);
    int n = 0;
    for (const std::string& line : lines) n += absl::StrContains(line, needle) ? 1 : 0;
    return n;
  }
};

class RouterHttpTest : public testing::Test {
 protected:
  void SetUp() override {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    prefill_ = std::make_unique<FakePrefill>("p0", prefill_script_);
    decode_ = std::make_unique<FakeDecode>("d0", decode_script_);
    RouterOptions options;
    options.listen = "127.0.0.1:0";
    options.prefill_nodes = {prefill_->address()};
    options.decode_nodes = {decode_->address()};
    options.health_interval = absl::Milliseconds(50);
    options.rpc_timeout = absl::Seconds(30);
    // Longer than every wait here: a cancellation seen within kWait came from the client side.
    options.decode_idle_timeout = absl::Seconds(30);
    auto router =
        RouterServer::Start(options, MakeTestModel(256), [log = log_](const std::string& line) {
          absl::MutexLock lock(&log->mu);
          log->lines.push_back(line);
        });
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    auto http = RouterHttp::Start("127.0.0.1:0", 16, &router_->deps(), [] { return ""; });
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = *std::move(http);
    // Both nodes healthy before a request is sent.
    const absl::Time deadline = absl::Now() + kWait;
    while (GetStatus(http_->port(), "/health") != 200 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));  // polling an observed condition
    }
  }

  void TearDown() override {
    if (http_ != nullptr) http_->Shutdown(absl::Seconds(2));
    if (router_ != nullptr) router_->Shutdown(absl::Seconds(2));
  }

  std::shared_ptr<LogLines> log_ = std::make_shared<LogLines>();
  std::shared_ptr<PrefillScript> prefill_script_ = std::make_shared<PrefillScript>();
  std::shared_ptr<DecodeScript> decode_script_ = std::make_shared<DecodeScript>();
  std::unique_ptr<FakePrefill> prefill_;
  std::unique_ptr<FakeDecode> decode_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<RouterHttp> http_;
};

TEST_F(RouterHttpTest, StreamedCompletionCarriesEveryTokenThenDone) {
  const HttpReply whole =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hi", "max_tokens": 6})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json body = Json::parse(whole.body);
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  EXPECT_FALSE(whole.request_id.empty());
  EXPECT_EQ(body["id"], "cmpl-" + whole.request_id);

  const HttpReply streamed = Post(http_->port(), "/v1/completions",
                                  R"({"prompt": "hi", "max_tokens": 6, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  bool done = false;
  const std::vector<Json> events = Events(streamed.body, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(StreamedText(events), body["choices"][0]["text"]);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(RouterHttpTest, ResourceExhaustedIs429) {
  {
    absl::MutexLock lock(&prefill_script_->mu);
    for (int i = 0; i < 3; ++i) {
      prefill_script_->failures.push_back(
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no KV capacity"));
    }
  }
  const HttpReply reply =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hi", "max_tokens": 4})");
  EXPECT_EQ(reply.status, 429) << reply.body;
  const Json body = Json::parse(reply.body);
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("no KV capacity"), std::string::npos);
  EXPECT_FALSE(reply.request_id.empty());
}

TEST_F(RouterHttpTest, StopStringEndsTheResponseAndCancelsTheDecodeCall) {
  // The fake's tokens depend only on their step: learn the text, then stop inside it.
  const HttpReply plain =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hi", "max_tokens": 6})");
  ASSERT_EQ(plain.status, 200);
  const std::string text = Json::parse(plain.body)["choices"][0]["text"];
  ASSERT_GE(text.size(), 5u);
  const std::string stop = text.substr(2, 2);  // tokens 2 and 3
  const std::string expected = text.substr(0, text.find(stop));
  {
    absl::MutexLock lock(&decode_script_->mu);
    // Tokens 4..7 follow the stop at once, racing the cancellation; then silent until cancelled.
    decode_script_->calls.push_back({.hang_after = 8});
  }
  const HttpReply reply = Post(http_->port(), "/v1/completions",
                               Json{{"prompt", "hi"},
                                    {"max_tokens", 50},
                                    {"stop", stop},
                                    {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}}
                                   .dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  bool done = false;
  const std::vector<Json> events = Events(reply.body, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(StreamedText(events), expected);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "stop");
  // The usage counts the tokens up to the one that completed the stop string (0..3), not those
  // the decode node produced before the cancellation reached it.
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 4) << reply.body;
  // Without the cancellation the hung decode call would last the 30 s idle timeout.
  EXPECT_TRUE(decode_->WaitForCancelled(1, kWait));

  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back({.hang_after = 8});
  }
  const HttpReply whole = Post(http_->port(), "/v1/completions",
                               Json{{"prompt", "hi"}, {"max_tokens", 50}, {"stop", stop}}.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json body = Json::parse(whole.body);
  EXPECT_EQ(body["choices"][0]["text"], expected);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["completion_tokens"], 4) << whole.body;
  EXPECT_TRUE(decode_->WaitForCancelled(2, kWait));
}

TEST_F(RouterHttpTest, ClientLeavingWhileNoTokenComesCancelsTheRequest) {
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back({.hang_after = 0});
  }
  const absl::Time start = absl::Now();
  // Hang up once the first token's chunk (the prefill's) arrived and the decode call is in
  // flight (the server sees the close at once: a client leaving before the router started the
  // decode call cancels the request before there is a call to cancel); the decode call sends
  // nothing, so no write can fail: only the connection watch can notice.
  const HttpReply reply = Post(
      http_->port(), "/v1/completions", R"({"prompt": "hi", "max_tokens": 50, "stream": true})",
      [this](const std::string& body) {
        bool done = false;
        if (StreamedText(Events(body, &done)).empty()) return true;
        const absl::Time deadline = absl::Now() + kWait;
        while (decode_->requests().empty() && absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(2));  // polling an observed condition
        }
        return false;
      });
  EXPECT_EQ(reply.code, CURLE_WRITE_ERROR);
  EXPECT_TRUE(decode_->WaitForCancelled(1, kWait));
  EXPECT_LT(absl::Now() - start, kWait);
}

TEST_F(RouterHttpTest, NonStreamingClientTimingOutCancelsTheRequest) {
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back({.hang_after = 2});
  }
  const HttpReply reply =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hi", "max_tokens": 50})", nullptr,
           /*timeout_ms=*/500);
  EXPECT_EQ(reply.code, CURLE_OPERATION_TIMEDOUT);
  EXPECT_TRUE(decode_->WaitForCancelled(1, kWait));
}

// The ids a completion request sends (and /tokenize reports) with add_special_tokens and
// truncate_prompt_tokens, on a model that asks for BOS.
TEST(TokenizeOpenAiPromptTest, AddSpecialTokensAndTruncation) {
  const std::unique_ptr<ServedModel> model = MakeTestModel(4, "", /*add_bos=*/true);
  ASSERT_NE(model, nullptr);
  const auto ids = [&model](OpenAiEndpoint endpoint, const std::string& body) {
    absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(endpoint, body);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return std::vector<int32_t>{};
    absl::StatusOr<std::vector<int32_t>> tokens = TokenizeOpenAiPrompt(*model, *r);
    EXPECT_TRUE(tokens.ok()) << tokens.status();
    return tokens.ok() ? *tokens : std::vector<int32_t>{};
  };
  constexpr OpenAiEndpoint kCmpl = OpenAiEndpoint::kCompletions;
  const int32_t h = ByteToken('h'), i = ByteToken('i');
  EXPECT_EQ(ids(kCmpl, R"({"prompt": "hi"})"), (std::vector<int32_t>{1, h, i}));
  EXPECT_EQ(ids(kCmpl, R"({"prompt": "hi", "add_special_tokens": true})"),
            (std::vector<int32_t>{1, h, i}));
  EXPECT_EQ(ids(kCmpl, R"({"prompt": "hi", "add_special_tokens": false})"),
            (std::vector<int32_t>{h, i}));
  // Token ids are used as given either way.
  EXPECT_EQ(ids(kCmpl, R"({"prompt": [7, 8], "add_special_tokens": false})"),
            (std::vector<int32_t>{7, 8}));
  // truncate_prompt_tokens keeps the last k (BOS counts as a prompt token); -1 = the context (4).
  EXPECT_EQ(ids(kCmpl, R"({"prompt": "hi", "truncate_prompt_tokens": 2})"),
            (std::vector<int32_t>{h, i}));
  EXPECT_EQ(ids(kCmpl, R"({"prompt": [1, 2, 3, 4, 5, 6], "truncate_prompt_tokens": -1})"),
            (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(ids(kCmpl, R"({"prompt": [1, 2], "truncate_prompt_tokens": 5})"),
            (std::vector<int32_t>{1, 2}));
  // /tokenize reports the same ids.
  absl::StatusOr<TokenizeAnswer> answer =
      Tokenize(*model, R"({"prompt": "hi", "add_special_tokens": false})");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(Json::parse(answer->body)["tokens"], Json::array({h, i}));
  EXPECT_EQ(Json::parse(answer->body)["max_model_len"], 4);
}

TEST_F(RouterHttpTest, WrongMethodIs405AndUnknownPathIs404WithErrorObjects) {
  const HttpReply wrong = Post(http_->port(), "/v1/models", "{}");
  EXPECT_EQ(wrong.status, 405);
  const Json e405 = Json::parse(wrong.body)["error"];
  EXPECT_EQ(e405["code"], 405);
  EXPECT_EQ(e405["type"], "invalid_request_error");
  EXPECT_THAT(e405["message"].get<std::string>(), HasSubstr("POST"));
  EXPECT_TRUE(e405["param"].is_null());
  const HttpReply missing = Post(http_->port(), "/v1/nothing", "{}");
  EXPECT_EQ(missing.status, 404);
  const Json e404 = Json::parse(missing.body)["error"];
  EXPECT_EQ(e404["code"], 404);
  EXPECT_EQ(e404["type"], "not_found_error");
  EXPECT_THAT(e404["message"].get<std::string>(), HasSubstr("/v1/nothing"));
  const HttpReply get_missing = Post(http_->port(), "/tokenizer", std::nullopt);
  EXPECT_EQ(get_missing.status, 404);
  EXPECT_EQ(Json::parse(get_missing.body)["error"]["code"], 404);
}

TEST_F(RouterHttpTest, RefusedFieldsAre400NamingTheFieldAndNothingRuns) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_schema", "json_schema": {"name": "t",
           "schema": {"type": "object", "patternProperties": {}}}}})",
       "response_format.json_schema.schema"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}]})",
       "tools[0].function.parameters"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x", "name": "bob"}]})", "messages[0].name"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
  };
  for (const auto& [body, param] : cases) {
    const HttpReply reply = Post(http_->port(), "/v1/chat/completions", body);
    EXPECT_EQ(reply.status, 400) << body;
    const Json error = Json::parse(reply.body)["error"];
    EXPECT_EQ(error["param"], param) << reply.body;
    EXPECT_EQ(error["code"], 400);
  }
  EXPECT_TRUE(prefill_->prefills().empty());
}

TEST_F(RouterHttpTest, UnknownFieldIsAnsweredAndLoggedOncePerName) {
  const std::string body = R"({"prompt": "hi", "max_tokens": 2, "tandem_http_test_field": 1,
      "stream_options": {"tandem_http_test_option": true}})";
  for (int i = 0; i < 3; ++i) {
    const HttpReply reply = Post(http_->port(), "/v1/completions", body);
    EXPECT_EQ(reply.status, 200) << reply.body;
  }
  EXPECT_EQ(
      log_->Count("openai_unknown_field field=tandem_http_test_field endpoint=/v1/completions"), 1);
  EXPECT_EQ(log_->Count("openai_unknown_field field=stream_options.tandem_http_test_option "), 1);
}

TEST_F(RouterHttpTest, TokenizeAndDetokenize) {
  const HttpReply text = Post(http_->port(), "/tokenize", R"({"prompt": "hi"})");
  ASSERT_EQ(text.status, 200) << text.body;
  const Json t = Json::parse(text.body);
  EXPECT_EQ(t["count"], 2);
  EXPECT_EQ(t["max_model_len"], 256);
  EXPECT_EQ(t["tokens"], Json::array({ByteToken('h'), ByteToken('i')}));
  EXPECT_FALSE(t.contains("token_strs"));
  const HttpReply strs =
      Post(http_->port(), "/tokenize", R"({"prompt": "he", "return_token_strs": true})");
  ASSERT_EQ(strs.status, 200) << strs.body;
  EXPECT_EQ(Json::parse(strs.body)["token_strs"], Json::array({"he"}));
  // A chat prompt counts exactly the prompt_tokens of the same chat completion.
  const std::string messages = R"("messages": [{"role": "user", "content": "hello there"}])";
  const HttpReply chat = Post(http_->port(), "/tokenize", absl::StrCat("{", messages, "}"));
  ASSERT_EQ(chat.status, 200) << chat.body;
  const HttpReply completion = Post(http_->port(), "/v1/chat/completions",
                                    absl::StrCat("{", messages, R"(, "max_tokens": 1})"));
  ASSERT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(Json::parse(chat.body)["count"],
            Json::parse(completion.body)["usage"]["prompt_tokens"]);
  const Json chat_ids = Json::parse(chat.body)["tokens"];

  const HttpReply back = Post(http_->port(), "/detokenize",
                              Json{{"model", kTestModelName}, {"tokens", chat_ids}}.dump());
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_THAT(Json::parse(back.body)["prompt"].get<std::string>(), HasSubstr("hello there"));
  const HttpReply plain =
      Post(http_->port(), "/detokenize", Json{{"tokens", {ByteToken('o'), ByteToken('k')}}}.dump());
  EXPECT_EQ(Json::parse(plain.body)["prompt"], "ok");

  const HttpReply bad_id = Post(http_->port(), "/detokenize", R"({"tokens": [1, 99999]})");
  EXPECT_EQ(bad_id.status, 400);
  EXPECT_EQ(Json::parse(bad_id.body)["error"]["param"], "tokens");
  const HttpReply bad_model =
      Post(http_->port(), "/tokenize", R"({"model": "other", "prompt": "x"})");
  EXPECT_EQ(bad_model.status, 404);
  // add_generation_prompt false drops the assistant turn's opening; continue_final_message leaves
  // the last message open, its text the prompt's end.
  const Json user = Json::array({{{"role", "user"}, {"content", "hi"}}});
  const HttpReply opened = Post(http_->port(), "/tokenize", Json{{"messages", user}}.dump());
  const HttpReply closed = Post(http_->port(), "/tokenize",
                                Json{{"messages", user}, {"add_generation_prompt", false}}.dump());
  ASSERT_EQ(opened.status, 200) << opened.body;
  ASSERT_EQ(closed.status, 200) << closed.body;
  const std::vector<int32_t> opened_ids = Json::parse(opened.body)["tokens"];
  const std::vector<int32_t> closed_ids = Json::parse(closed.body)["tokens"];
  ASSERT_LT(closed_ids.size(), opened_ids.size());
  EXPECT_TRUE(std::equal(closed_ids.begin(), closed_ids.end(), opened_ids.begin()));
  Json prefix = user;
  prefix.push_back({{"role", "assistant"}, {"content", "The answer is"}});
  const HttpReply continued = Post(
      http_->port(), "/tokenize",
      Json{{"messages", prefix}, {"add_generation_prompt", false}, {"continue_final_message", true}}
          .dump());
  ASSERT_EQ(continued.status, 200) << continued.body;
  const HttpReply rendered = Post(http_->port(), "/detokenize",
                                  Json{{"tokens", Json::parse(continued.body)["tokens"]}}.dump());
  ASSERT_EQ(rendered.status, 200) << rendered.body;
  EXPECT_TRUE(
      absl::EndsWith(Json::parse(rendered.body)["prompt"].get<std::string>(), "The answer is"))
      << rendered.body;
  const HttpReply refused =
      Post(http_->port(), "/tokenize",
           Json{{"messages", prefix}, {"continue_final_message", true}}.dump());
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(Json::parse(refused.body)["error"]["param"], "continue_final_message");
  EXPECT_EQ(Post(http_->port(), "/tokenize", std::nullopt).status, 405);
  // One chat completion ran; tokenising sent nothing to a node.
  EXPECT_EQ(prefill_->prefills().size(), 1u);
}

TEST_F(RouterHttpTest, ModelsMaxModelLenAndSystemFingerprint) {
  const HttpReply models = Post(http_->port(), "/v1/models", std::nullopt);
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(Json::parse(models.body)["data"][0]["max_model_len"], 256);
  const HttpReply a =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hi", "max_tokens": 1})");
  const HttpReply b = Post(http_->port(), "/v1/chat/completions",
                           R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                               "stream": true})");
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  const std::string fp = Json::parse(a.body)["system_fingerprint"];
  EXPECT_THAT(fp, testing::MatchesRegex("fp_[0-9a-f]{16}"));
  bool done = false;
  const std::vector<Json> events = Events(b.body, &done);
  EXPECT_FALSE(events.empty());
  for (const Json& event : events) EXPECT_EQ(event["system_fingerprint"], fp);
  EXPECT_TRUE(done);
}

TEST_F(RouterHttpTest, CachedTokensReachTheUsage) {
  {
    absl::MutexLock lock(&prefill_script_->mu);
    prefill_script_->cached_tokens = 3;
  }
  const HttpReply whole =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hello", "max_tokens": 3})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(Json::parse(whole.body)["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  const HttpReply streamed = Post(http_->port(), "/v1/completions",
                                  R"({"prompt": "hello", "max_tokens": 3, "stream": true,
                                      "stream_options": {"include_usage": true}})");
  bool done = false;
  const std::vector<Json> events = Events(streamed.body, &done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  // A node claiming more than the prompt is clamped to the prompt.
  {
    absl::MutexLock lock(&prefill_script_->mu);
    prefill_script_->cached_tokens = 1000;
  }
  const HttpReply clamped =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hello", "max_tokens": 1})");
  const Json usage = Json::parse(clamped.body)["usage"];
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], usage["prompt_tokens"]);
}

TEST_F(RouterHttpTest, VllmFieldsAreHonoured) {
  // truncate_prompt_tokens: the prompt's last 2 tokens ("hello" is he, l, l, o).
  const HttpReply truncated = Post(http_->port(), "/v1/completions",
                                   R"({"prompt": "hello", "max_tokens": 1,
                                       "truncate_prompt_tokens": 2})");
  ASSERT_EQ(truncated.status, 200) << truncated.body;
  EXPECT_EQ(Json::parse(truncated.body)["usage"]["prompt_tokens"], 2);
  const std::vector<v1::PrefillRequest> prefills = prefill_->prefills();
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_THAT(prefills[0].prompt_ids(), testing::ElementsAre(ByteToken('l'), ByteToken('o')));
  // request_id in the body names the request (no x-request-id header).
  const HttpReply named = Post(http_->port(), "/v1/completions",
                               R"({"prompt": "hi", "max_tokens": 1, "request_id": "body-id-1"})");
  ASSERT_EQ(named.status, 200) << named.body;
  EXPECT_EQ(named.request_id, "body-id-1");
  EXPECT_EQ(Json::parse(named.body)["id"], "cmpl-body-id-1");
  const HttpReply header_wins =
      Post(http_->port(), "/v1/completions",
           R"({"prompt": "hi", "max_tokens": 1, "request_id": "body-id-2"})", nullptr, 20000,
           {"x-request-id: header-id"});
  EXPECT_EQ(header_wins.request_id, "header-id");
  const HttpReply bad_id = Post(http_->port(), "/v1/completions",
                                R"({"prompt": "hi", "max_tokens": 1, "request_id": "a b"})");
  EXPECT_EQ(bad_id.status, 400);
  EXPECT_EQ(Json::parse(bad_id.body)["error"]["param"], "request_id");
  // include_stop_str_in_output: the text ends with the stop string.
  const HttpReply plain =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hi", "max_tokens": 6})");
  const std::string text = Json::parse(plain.body)["choices"][0]["text"];
  ASSERT_GE(text.size(), 5u);
  const std::string stop = text.substr(2, 2);
  const HttpReply with_stop = Post(
      http_->port(), "/v1/completions",
      Json{
          {"prompt", "hi"}, {"max_tokens", 6}, {"stop", stop}, {"include_stop_str_in_output", true}}
          .dump());
  ASSERT_EQ(with_stop.status, 200) << with_stop.body;
  EXPECT_EQ(Json::parse(with_stop.body)["choices"][0]["text"],
            text.substr(0, text.find(stop) + stop.size()));
  EXPECT_EQ(Json::parse(with_stop.body)["choices"][0]["finish_reason"], "stop");
  // min_tokens 4: the stop string in tokens 2-3 is not matched (vLLM); a later occurrence that
  // ends after the 4th token's text would be.
  const HttpReply min_tokens =
      Post(http_->port(), "/v1/completions",
           Json{{"prompt", "hi"}, {"max_tokens", 6}, {"stop", stop}, {"min_tokens", 4}}.dump());
  ASSERT_EQ(min_tokens.status, 200) << min_tokens.body;
  const size_t later = text.find(stop, 3);
  EXPECT_EQ(Json::parse(min_tokens.body)["choices"][0]["text"], text.substr(0, later));
  EXPECT_EQ(Json::parse(min_tokens.body)["choices"][0]["finish_reason"],
            later == std::string::npos ? "length" : "stop");
}

// Requests refused before they run — no or a wrong API key (401), a body over the limit (413), a
// malformed body (400), an unknown model (404), an unknown path (404), a wrong method (405) — are
// each counted in the router's /metrics: tandem_http_requests_total by endpoint and status, and the
// refused completion requests in tandem_request_failure_total by code, next to a request that ran.
class RouterHttpMetricsTest : public testing::Test {
 protected:
  static constexpr char kKey[] = "sk-metrics-test";

  void SetUp() override {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    prefill_ = std::make_unique<FakePrefill>("p0", prefill_script_);
    decode_ = std::make_unique<FakeDecode>("d0", decode_script_);
    RouterOptions options;
    options.listen = "127.0.0.1:0";
    options.prefill_nodes = {prefill_->address()};
    options.decode_nodes = {decode_->address()};
    options.health_interval = absl::Milliseconds(50);
    RouterAccess access;
    absl::StatusOr<ApiKeys> keys = ApiKeys::Parse(kKey, "test keys");
    ASSERT_TRUE(keys.ok()) << keys.status();
    access.api_keys = std::make_shared<const ApiKeys>(*std::move(keys));
    auto router = RouterServer::Start(
        options, MakeTestModel(256), [](const std::string&) {}, std::move(access));
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    HttpServerOptions http_options;
    http_options.threads = 16;
    http_options.max_body_bytes = 1024;
    const RouterServer* server = router_.get();
    auto http = RouterHttp::Start("127.0.0.1:0", std::move(http_options), &router_->deps(),
                                  [server] { return RenderPrometheusText(server->metrics()); });
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = *std::move(http);
    const absl::Time deadline = absl::Now() + kWait;
    while (GetStatus(http_->port(), "/health") != 200 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));  // polling an observed condition
    }
  }
  void TearDown() override {
    if (http_ != nullptr) http_->Shutdown(absl::Seconds(2));
    if (router_ != nullptr) router_->Shutdown(absl::Seconds(2));
  }

  HttpReply Send(const std::string& path, const std::optional<std::string>& body,
                 bool with_key = true) {
    std::vector<std::string> headers;
    if (with_key) headers.push_back(absl::StrCat("Authorization: Bearer ", kKey));
    return Post(http_->port(), path, body, nullptr, 20000, headers);
  }

  // The /metrics text once it has every line of `want` (a response is counted just after it was
  // written, so the scrape may briefly trail the client); the last scrape otherwise.
  std::string ScrapeUntil(const std::vector<std::string>& want) {
    std::string text;
    const absl::Time deadline = absl::Now() + kWait;
    while (absl::Now() < deadline) {
      text = Send("/metrics", std::nullopt).body;
      bool all = true;
      for (const std::string& line : want) all = all && text.find(line + "\n") != std::string::npos;
      if (all) return text;
      absl::SleepFor(absl::Milliseconds(10));  // polling an observed condition
    }
    return text;
  }

  std::shared_ptr<PrefillScript> prefill_script_ = std::make_shared<PrefillScript>();
  std::shared_ptr<DecodeScript> decode_script_ = std::make_shared<DecodeScript>();
  std::unique_ptr<FakePrefill> prefill_;
  std::unique_ptr<FakeDecode> decode_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<RouterHttp> http_;
};

TEST_F(RouterHttpMetricsTest, EveryRefusedRequestIsCountedByEndpointStatusAndCode) {
  const std::string ok = R"({"prompt": "hi", "max_tokens": 3})";
  EXPECT_EQ(Send("/v1/completions", ok, /*with_key=*/false).status, 401);
  EXPECT_EQ(Send("/v1/models", std::nullopt, /*with_key=*/false).status, 401);
  EXPECT_EQ(Send("/v1/completions", "{not json").status, 400);
  EXPECT_EQ(Send("/v1/chat/completions",
                 R"({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]})")
                .status,
            404);
  const HttpReply big = Send("/v1/completions", Json{{"prompt", std::string(2048, 'x')}}.dump());
  EXPECT_EQ(big.status, 413) << big.body;
  EXPECT_EQ(Send("/v1/nothing", "{}").status, 404);
  EXPECT_EQ(Send("/v1/models", "{}").status, 405);
  EXPECT_EQ(Send("/v1/completions", ok).status, 200);

  const std::vector<std::string> want = {
      R"(tandem_http_requests_total{endpoint="/v1/completions",status="401"} 1)",
      R"(tandem_http_requests_total{endpoint="/v1/models",status="401"} 1)",
      R"(tandem_http_requests_total{endpoint="/v1/completions",status="400"} 1)",
      R"(tandem_http_requests_total{endpoint="/v1/chat/completions",status="404"} 1)",
      R"(tandem_http_requests_total{endpoint="/v1/completions",status="413"} 1)",
      R"(tandem_http_requests_total{endpoint="other",status="404"} 1)",
      R"(tandem_http_requests_total{endpoint="/v1/models",status="405"} 1)",
      R"(tandem_http_requests_total{endpoint="/v1/completions",status="200"} 1)",
      // The refused completion requests, by the code gRPC would give them (/v1/models, an
      // unknown path and a wrong method are not generation requests).
      R"(tandem_request_failure_total{code="UNAUTHENTICATED"} 1)",
      R"(tandem_request_failure_total{code="INVALID_ARGUMENT"} 1)",
      R"(tandem_request_failure_total{code="NOT_FOUND"} 1)",
      R"(tandem_request_failure_total{code="RESOURCE_EXHAUSTED"} 1)",
      R"(tandem_request_success_total{finish_reason="length"} 1)",
  };
  const std::string text = ScrapeUntil(want);
  for (const std::string& line : want) EXPECT_THAT(text, HasSubstr(line + "\n"));
  // Nothing else failed: exactly those four failure series.
  int failure_series = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    failure_series += absl::StartsWith(line, "tandem_request_failure_total{");
  }
  EXPECT_EQ(failure_series, 4) << text;
}

TEST_F(RouterHttpMetricsTest, HealthIs503WhileTheRouterDrains) {
  ASSERT_EQ(GetStatus(http_->port(), "/health"), 200);
  router_->Shutdown(absl::ZeroDuration());
  const HttpReply health = Post(http_->port(), "/health", std::nullopt);
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(Json::parse(health.body)["status"], "draining") << health.body;
  // A request is refused as the gRPC API refuses it: UNAVAILABLE, so a client tries another router.
  const HttpReply refused = Send("/v1/completions", R"({"prompt": "hi", "max_tokens": 3})");
  EXPECT_EQ(refused.status, 503) << refused.body;
  // ... and counted as a failure by that code.
  const std::string line = R"(tandem_request_failure_total{code="UNAVAILABLE"} 1)";
  EXPECT_THAT(ScrapeUntil({line}), HasSubstr(line + "\n"));
}

// Provenance and strict mode over HTTP (docs/router.md#provenance-and-strict-mode): the header
// on every response, the body's tandem object on request, a strict request whose decode node dies
// mid-answer answered 503 naming the refused resume, and a misspelt tandem option refused.
TEST_F(RouterHttpTest, ProvenanceHeaderAndObjectAndAStrictRefusal) {
  const HttpReply whole =
      Post(http_->port(), "/v1/completions",
           R"({"prompt": "hi", "max_tokens": 4, "tandem": {"provenance": true}})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  ASSERT_FALSE(whole.provenance.empty());
  const Json header = Json::parse(whole.provenance);
  EXPECT_EQ(header["final"], true);
  EXPECT_EQ(header["prefill"][0]["node"], prefill_->address());
  EXPECT_EQ(header["decode"][0]["node"], decode_->address());
  EXPECT_EQ(header["decode"][0]["layout"], "tp1 block16");
  EXPECT_EQ(Json::parse(whole.body)["tandem"]["provenance"], header);

  // Streamed without include_usage: the finish chunk carries the object; the header what was
  // known at the first token (the prefill's).
  const HttpReply streamed =
      Post(http_->port(), "/v1/completions",
           R"({"prompt": "hi", "max_tokens": 4, "stream": true, "tandem": {"provenance": true}})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const Json first = Json::parse(streamed.provenance);
  EXPECT_EQ(first["final"], false);
  EXPECT_EQ(first["prefill"][0]["layout"], "tp2 block16");
  EXPECT_TRUE(first["decode"].empty());
  bool done = false;
  const std::vector<Json> events = Events(streamed.body, &done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back()["tandem"]["provenance"]["final"], true);
  EXPECT_EQ(events.back()["tandem"]["provenance"]["decode"].size(), 1u);
  // Without asking, no object (the header is always there).
  const HttpReply plain =
      Post(http_->port(), "/v1/completions", R"({"prompt": "hi", "max_tokens": 4})");
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_FALSE(Json::parse(plain.body).contains("tandem"));
  EXPECT_FALSE(plain.provenance.empty());

  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back({.die_after = 2});
  }
  const HttpReply strict = Post(http_->port(), "/v1/completions",
                                R"({"prompt": "hi", "max_tokens": 8, "tandem": {"strict": true}})");
  EXPECT_EQ(strict.status, 503) << strict.body;
  const Json error = Json::parse(strict.body)["error"];
  EXPECT_EQ(error["code"], 503);
  EXPECT_THAT(error["message"].get<std::string>(),
              HasSubstr("strict mode: resuming on another decode node (resume) refused after"));
  const Json refused = Json::parse(strict.provenance);
  EXPECT_EQ(refused["refused"], "resume");
  EXPECT_EQ(refused["strict"], true);

  const HttpReply typo = Post(http_->port(), "/v1/completions",
                              R"({"prompt": "hi", "max_tokens": 4, "tandem": {"strcit": true}})");
  EXPECT_EQ(typo.status, 400) << typo.body;
  EXPECT_EQ(Json::parse(typo.body)["error"]["param"], "tandem.strcit");
}

}  // namespace
}  // namespace tandem::testing_router
