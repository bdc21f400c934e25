// The CLI commands against a real router over fake nodes: what a user sees on stdout/stderr.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cli_format.h"
#include "client/cli_runner.h"
#include "client/router_failover.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/router_server.h"
#include "tests/router/fake_nodes.h"
#include "tests/router/test_model.h"

namespace tandem::testing_router {
namespace {

using testing::HasSubstr;
using testing::MatchesRegex;

class ClientRunnerTest : public testing::Test {
 protected:
  void SetUp() override {
    RouterOptions options;
    options.listen = "127.0.0.1:0";
    options.prefill_nodes = {prefill_.address()};
    options.decode_nodes = {decode_.address()};
    options.health_interval = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<RouterServer>> router =
        RouterServer::Start(options, MakeTestModel(64), [](const std::string&) {});
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    stub_ = v1::Router::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", router_->port()),
                                                    grpc::InsecureChannelCredentials()));
    // Bounded wait for both nodes to be polled healthy.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      std::ostringstream out, err;
      ASSERT_EQ(RunStatus(*stub_, absl::Seconds(5), out, err), 0) << err.str();
      if (out.str().find("  no  ") == std::string::npos) return;
      absl::SleepFor(absl::Milliseconds(10));  // poll interval of an observed condition
    }
    FAIL() << "nodes never became healthy";
  }

  std::shared_ptr<PrefillScript> prefill_script_ = std::make_shared<PrefillScript>();
  std::shared_ptr<DecodeScript> decode_script_ = std::make_shared<DecodeScript>();
  FakePrefill prefill_{"p0", prefill_script_};
  FakeDecode decode_{"d0", decode_script_};
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<v1::Router::Stub> stub_;
};

TEST_F(ClientRunnerTest, GenerateStreamsTextThenStats) {
  v1::GenerateRequest request;
  request.set_text("hi");
  request.set_max_tokens(6);
  std::ostringstream out, err;
  EXPECT_EQ(RunGenerate(*stub_, request, absl::Seconds(10), out, err), 0);
  EXPECT_EQ(out.str(), "abcdef\n");
  EXPECT_THAT(err.str(), MatchesRegex("tokens=6 ttft_ms=[0-9.]+ tokens_per_s=[0-9.]+ "
                                      "finish=length retries=0\n"));
}

TEST_F(ClientRunnerTest, GenerateErrorPrintsTheCodeAndFails) {
  v1::GenerateRequest request;
  request.set_text("hi");
  request.set_max_tokens(0);
  std::ostringstream out, err;
  EXPECT_EQ(RunGenerate(*stub_, request, absl::Seconds(10), out, err), 1);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(), "error: INVALID_ARGUMENT: max_tokens must be >= 1 (got 0)\n");
}

// The --top_p contract, end to end through the CLI's request: (0, 1], and `--top_p 0` is an
// error rather than "unset" (the flag always sends the value it has).
TEST_F(ClientRunnerTest, TopPZeroFromTheCliIsRejected) {
  GenerateArgs args;
  args.prompt = "hi";
  args.max_tokens = 2;
  args.top_p = 0.f;
  absl::StatusOr<v1::GenerateRequest> request = BuildGenerateRequest(args);
  ASSERT_TRUE(request.ok()) << request.status();
  std::ostringstream out, err;
  EXPECT_EQ(RunGenerate(*stub_, *request, absl::Seconds(10), out, err), 1);
  EXPECT_EQ(err.str(), "error: INVALID_ARGUMENT: top_p must be in (0, 1] (got 0)\n");
  args.top_p = 1.f;
  request = BuildGenerateRequest(args);
  ASSERT_TRUE(request.ok()) << request.status();
  std::ostringstream out1, err1;
  EXPECT_EQ(RunGenerate(*stub_, *request, absl::Seconds(10), out1, err1), 0) << err1.str();
}

TEST_F(ClientRunnerTest, StatusPrintsTheFleet) {
  std::ostringstream out, err;
  EXPECT_EQ(RunStatus(*stub_, absl::Seconds(5), out, err), 0);
  EXPECT_THAT(out.str(), HasSubstr("model: tiny-test\n"));
  EXPECT_THAT(out.str(), HasSubstr(absl::StrCat("prefill  ", prefill_.address(), "  yes")));
  EXPECT_THAT(out.str(), HasSubstr(absl::StrCat("decode   ", decode_.address(), "  yes")));
  EXPECT_EQ(err.str(), "");
}

// `tandem --router DOWN,UP`: the command goes on to the router that answers, and prints what a
// single router would have; a draining router refuses the same way (UNAVAILABLE before any
// token), tested in client_failover_test and drain_e2e_test.
TEST_F(ClientRunnerTest, CommandsPassOverARouterThatIsDown) {
  auto down =
      v1::Router::NewStub(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  const RouterFailover routers({down.get(), stub_.get()});
  v1::GenerateRequest request;
  request.set_text("hi");
  request.set_max_tokens(6);
  for (int i = 0; i < 2; ++i) {  // the first call starts at the router that is down, the second not
    std::ostringstream out, err;
    EXPECT_EQ(RunGenerate(routers, request, absl::Seconds(10), out, err), 0) << err.str();
    EXPECT_EQ(out.str(), "abcdef\n");
  }
  for (int i = 0; i < 2; ++i) {
    std::ostringstream out, err;
    EXPECT_EQ(RunStatus(routers, absl::Seconds(5), out, err), 0) << err.str();
    EXPECT_THAT(out.str(), HasSubstr("model: tiny-test\n"));
  }
}

TEST(ClientRunnerNoRouterTest, UnreachableRouterIsAnErrorLine) {
  auto stub =
      v1::Router::NewStub(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  std::ostringstream out, err;
  EXPECT_EQ(RunStatus(*stub, absl::Seconds(5), out, err), 1);
  EXPECT_THAT(err.str(), testing::StartsWith("error: UNAVAILABLE: "));
}

}  // namespace
}  // namespace tandem::testing_router
