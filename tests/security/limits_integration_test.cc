// The router's abuse limits (docs/security.md) on the real router library against fake gRPC
// nodes in this process (tests/router/fake_nodes.h): --max_requests_in_flight refuses a request
// beyond it with RESOURCE_EXHAUSTED on gRPC and 429 on HTTP while another one is running, and
// --max_concurrent_streams holds a second stream on the same connection until the first ends
// while a new connection is served at once.
#include <curl/curl.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/http/router_http.h"
#include "router/router_server.h"
#include "tests/router/fake_nodes.h"
#include "tests/router/test_model.h"

namespace tandem::testing_router {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
constexpr absl::Duration kWait = absl::Seconds(10);

class RouterLimitsTest : public ::testing::Test {
 protected:
  void Start(RouterAccess access) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    prefill_ = std::make_unique<FakePrefill>("p0", prefill_script_);
    decode_ = std::make_unique<FakeDecode>("d0", decode_script_);
    RouterOptions options;
    options.listen = "127.0.0.1:0";
    options.prefill_nodes = {prefill_->address()};
    options.decode_nodes = {decode_->address()};
    options.health_interval = absl::Milliseconds(50);
    options.decode_idle_timeout = absl::Seconds(30);
    auto router = RouterServer::Start(
        options, MakeTestModel(256), [](const std::string&) {}, std::move(access));
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    auto http = RouterHttp::Start("127.0.0.1:0", 8, &router_->deps(), [] { return ""; });
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = *std::move(http);
    address_ = absl::StrCat("127.0.0.1:", router_->port());
    // Both nodes healthy before anything is sent (a polled, observed condition).
    const absl::Time deadline = absl::Now() + kWait;
    while (!router_->deps().pool->AllHealthy() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(router_->deps().pool->AllHealthy());
  }

  void TearDown() override {
    if (http_ != nullptr) http_->Shutdown(absl::Seconds(2));
    if (router_ != nullptr) router_->Shutdown(absl::Seconds(2));
    curl_global_cleanup();
  }

  // Waits until the fake decode node has seen `n` calls.
  bool WaitForDecodeCalls(size_t n) {
    const absl::Time deadline = absl::Now() + kWait;
    while (decode_->requests().size() < n) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(10));  // polling an observed condition
    }
    return true;
  }

  static v1::GenerateRequest Request(int max_tokens) {
    v1::GenerateRequest r;
    r.set_text("hi");
    r.set_max_tokens(max_tokens);
    return r;
  }

  long PostCompletion(std::string* body) {
    CURL* curl = curl_easy_init();
    const std::string url = absl::StrCat("http://127.0.0.1:", http_->port(), "/v1/completions");
    const std::string json = R"({"prompt": "hi", "max_tokens": 4})";
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json.c_str());
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(
        curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t, size_t n, void* out) -> size_t {
          static_cast<std::string*>(out)->append(data, n);
          return n;
        });
    long status = 0;
    if (curl_easy_perform(curl) == CURLE_OK) {
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    }
    curl_easy_cleanup(curl);
    return status;
  }

  std::shared_ptr<PrefillScript> prefill_script_ = std::make_shared<PrefillScript>();
  std::shared_ptr<DecodeScript> decode_script_ = std::make_shared<DecodeScript>();
  std::unique_ptr<FakePrefill> prefill_;
  std::unique_ptr<FakeDecode> decode_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<RouterHttp> http_;
  std::string address_;
};

TEST_F(RouterLimitsTest, RequestsBeyondTheInFlightLimitAreRefused) {
  RouterAccess access;
  access.max_requests_in_flight = 1;
  Start(std::move(access));
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back({.hang_after = 1});  // holds the only slot until cancelled
  }
  auto stub =
      v1::Router::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext running_ctx;
  running_ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  auto running = stub->Generate(&running_ctx, Request(8));
  ASSERT_TRUE(WaitForDecodeCalls(1));

  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  auto refused = stub->Generate(&ctx, Request(4));
  v1::GenerateResponse response;
  EXPECT_FALSE(refused->Read(&response));
  const grpc::Status status = refused->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("limit of 1 requests in flight"));

  std::string body;
  EXPECT_EQ(PostCompletion(&body), 429) << body;
  EXPECT_THAT(Json::parse(body)["error"]["message"].get<std::string>(),
              HasSubstr("--max_requests_in_flight"));
  EXPECT_EQ(decode_->requests().size(), 1u);  // neither reached a node

  // Once the running request ends, the next one is served.
  running_ctx.TryCancel();
  while (running->Read(&response)) {
  }
  EXPECT_EQ(running->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const absl::Time deadline = absl::Now() + kWait;
  long code = 0;
  while (absl::Now() < deadline) {  // the router notices the cancel on its request thread
    body.clear();
    code = PostCompletion(&body);
    if (code != 429) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(code, 200) << body;
}

TEST_F(RouterLimitsTest, StreamsBeyondThePerConnectionLimitWaitInTheClient) {
  RouterAccess access;
  access.max_concurrent_streams = 1;
  Start(std::move(access));
  {
    absl::MutexLock lock(&decode_script_->mu);
    decode_script_->calls.push_back({.hang_after = 1});
  }
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  auto stub = v1::Router::NewStub(channel);
  grpc::ClientContext first_ctx;
  first_ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  auto first = stub->Generate(&first_ctx, Request(8));
  ASSERT_TRUE(WaitForDecodeCalls(1));

  // Same connection: the second stream cannot open while the first is open.
  grpc::ClientContext second_ctx;
  second_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  auto second = stub->Generate(&second_ctx, Request(4));
  v1::GenerateResponse response;
  EXPECT_FALSE(second->Read(&response));
  EXPECT_EQ(second->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(decode_->requests().size(), 1u);

  // Another connection is not limited by this one.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own connection, not `channel`'s
  auto other = v1::Router::NewStub(
      grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext other_ctx;
  other_ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  auto third = other->Generate(&other_ctx, Request(4));
  int tokens = 0;
  while (third->Read(&response)) tokens += response.has_token() ? 1 : 0;
  EXPECT_TRUE(third->Finish().ok());
  EXPECT_EQ(tokens, 4);

  first_ctx.TryCancel();
  while (first->Read(&response)) {
  }
  first->Finish();
}

}  // namespace
}  // namespace tandem::testing_router
