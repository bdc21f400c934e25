// RouterFailover (client/router_failover.h) against scripted Router services on real gRPC
// servers in this process: calls spread over the routers in turn; a router that refuses with
// UNAVAILABLE before answering — scripted, or stopped (connection refused) — is passed over for
// the next; a call that already received a token, and every other error, is never re-sent.
#include "client/router_failover.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr absl::Duration kDeadline = absl::Seconds(10);

// Answers Generate with `tokens` tokens, then (when `status` is OK) a final message, then
// `status`; ClusterStatus with `status`.
class ScriptedRouter : public v1::Router::Service {
 public:
  ScriptedRouter(int tokens, grpc::Status status) : tokens_(tokens), status_(std::move(status)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    stub_ = v1::Router::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }
  ~ScriptedRouter() override { Stop(); }

  grpc::Status Generate(grpc::ServerContext*, const v1::GenerateRequest*,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    ++calls_;
    for (int i = 0; i < tokens_; ++i) {
      v1::GenerateResponse r;
      r.mutable_token()->set_index(i);
      r.mutable_token()->set_id(100 + i);
      writer->Write(r);
    }
    if (status_.ok()) {
      v1::GenerateResponse r;
      r.mutable_final()->set_finish_reason("length");
      writer->Write(r);
    }
    return status_;
  }
  grpc::Status ClusterStatus(grpc::ServerContext*, const v1::ClusterStatusRequest*,
                             v1::ClusterStatusResponse* response) override {
    ++calls_;
    response->set_model(absl::StrCat("served by ", port_));
    return status_;
  }

  // Stops the server: its stub's calls are then refused (connection refused, UNAVAILABLE).
  void Stop() {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  v1::Router::StubInterface* stub() { return stub_.get(); }
  int calls() const { return calls_.load(); }
  int port() const { return port_; }

 private:
  const int tokens_;
  const grpc::Status status_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Router::Stub> stub_;
  std::atomic<int> calls_{0};
};

const grpc::Status kDraining(grpc::StatusCode::UNAVAILABLE,
                             "router is draining (shutting down): no new requests");

// One Generate: the tokens received and the outcome.
struct Call {
  RouterFailover::Outcome outcome;
  std::vector<int32_t> tokens;
  bool final = false;
};
Call Generate(const RouterFailover& routers) {
  Call call;
  v1::GenerateRequest request;
  request.set_text("hi");
  call.outcome = routers.Generate(request, absl::Now() + kDeadline,
                                  [&](const v1::GenerateResponse& r, grpc::ClientContext&) {
                                    if (r.has_token()) call.tokens.push_back(r.token().id());
                                    if (r.has_final()) call.final = true;
                                  });
  return call;
}

TEST(RouterFailoverTest, CallsGoToTheRoutersInTurn) {
  ScriptedRouter a(2, grpc::Status::OK), b(2, grpc::Status::OK);
  const RouterFailover routers({a.stub(), b.stub()});
  for (int i = 0; i < 4; ++i) {
    const Call call = Generate(routers);
    ASSERT_TRUE(call.outcome.status.ok()) << call.outcome.status.error_message();
    EXPECT_EQ(call.outcome.router, i % 2);
    EXPECT_EQ(call.outcome.refusals, 0);
    EXPECT_EQ(call.tokens, (std::vector<int32_t>{100, 101}));
    EXPECT_TRUE(call.final);
  }
  EXPECT_EQ(a.calls(), 2);
  EXPECT_EQ(b.calls(), 2);
}

TEST(RouterFailoverTest, ARouterRefusingBeforeAnsweringIsPassedOver) {
  ScriptedRouter draining(0, kDraining), b(3, grpc::Status::OK);
  const RouterFailover routers({draining.stub(), b.stub()});
  int refusals = 0;
  for (int i = 0; i < 4; ++i) {
    const Call call = Generate(routers);
    ASSERT_TRUE(call.outcome.status.ok()) << call.outcome.status.error_message();
    EXPECT_EQ(call.outcome.router, 1);
    EXPECT_EQ(call.tokens.size(), 3u);
    refusals += call.outcome.refusals;
  }
  // The two calls that started at the draining router were refused there once each.
  EXPECT_EQ(refusals, 2);
  EXPECT_EQ(draining.calls(), 2);
  EXPECT_EQ(b.calls(), 4);
}

TEST(RouterFailoverTest, AStoppedRouterIsPassedOver) {
  ScriptedRouter stopped(1, grpc::Status::OK), b(1, grpc::Status::OK);
  stopped.Stop();
  const RouterFailover routers({stopped.stub(), b.stub()});
  for (int i = 0; i < 2; ++i) {
    const Call call = Generate(routers);
    ASSERT_TRUE(call.outcome.status.ok()) << call.outcome.status.error_message();
    EXPECT_EQ(call.outcome.router, 1);
    EXPECT_EQ(call.outcome.refusals, i == 0 ? 1 : 0);
  }
  EXPECT_EQ(stopped.calls(), 0);
}

TEST(RouterFailoverTest, UnavailableAfterATokenIsNotSentAgain) {
  // The first call starts at the first router: it sends a token, then fails.
  ScriptedRouter a(1, grpc::Status(grpc::StatusCode::UNAVAILABLE, "node gone")),
      b(1, grpc::Status::OK);
  const RouterFailover routers({a.stub(), b.stub()});
  const Call call = Generate(routers);
  EXPECT_EQ(call.outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(call.outcome.status.error_message(), "node gone");
  EXPECT_EQ(call.outcome.router, 0);
  EXPECT_EQ(call.outcome.refusals, 0);
  EXPECT_EQ(call.tokens.size(), 1u);
  EXPECT_EQ(b.calls(), 0);
}

TEST(RouterFailoverTest, OtherErrorsAreReturnedAsTheyAre) {
  ScriptedRouter a(0, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "at its limit")),
      b(1, grpc::Status::OK);
  const RouterFailover routers({a.stub(), b.stub()});
  const Call call = Generate(routers);
  EXPECT_EQ(call.outcome.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(call.outcome.router, 0);
  EXPECT_EQ(b.calls(), 0);
}

TEST(RouterFailoverTest, EveryRouterRefusingReturnsTheLastRefusal) {
  ScriptedRouter a(0, kDraining), b(0, grpc::Status(grpc::StatusCode::UNAVAILABLE, "b drains"));
  const RouterFailover routers({a.stub(), b.stub()});
  const Call call = Generate(routers);
  EXPECT_EQ(call.outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(call.outcome.status.error_message(), "b drains");
  EXPECT_EQ(call.outcome.refusals, 2);
  EXPECT_EQ(a.calls(), 1);
  EXPECT_EQ(b.calls(), 1);
}

TEST(RouterFailoverTest, ClusterStatusPassesOverARefusingRouter) {
  ScriptedRouter a(0, kDraining), b(0, grpc::Status::OK);
  const RouterFailover routers({a.stub(), b.stub()});
  v1::ClusterStatusResponse status;
  const RouterFailover::Outcome outcome = routers.ClusterStatus(absl::Now() + kDeadline, &status);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_EQ(outcome.router, 1);
  EXPECT_EQ(outcome.refusals, 1);
  EXPECT_EQ(status.model(), absl::StrCat("served by ", b.port()));
}

TEST(RouterFailoverTest, NoRouterFailsPrecisely) {
  const RouterFailover routers({});
  const Call call = Generate(routers);
  EXPECT_EQ(call.outcome.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(call.outcome.status.error_message(), "no router address given");
}

TEST(ParseRouterListTest, ListsAndErrors) {
  EXPECT_EQ(*ParseRouterList("a:1"), (std::vector<std::string>{"a:1"}));
  EXPECT_EQ(*ParseRouterList("a:1, b:2"), (std::vector<std::string>{"a:1", "b:2"}));
  const absl::StatusOr<std::vector<std::string>> bad = ParseRouterList("a:1,,b:2");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "--router: empty address in 'a:1,,b:2' (expected HOST:PORT[,HOST:PORT...])");
  EXPECT_FALSE(ParseRouterList("").ok());
}

}  // namespace
}  // namespace tandem
