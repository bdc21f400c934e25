// The lease-expiry race of docs/RELIABILITY.md ("Soak", finding 2), on the real path: the real
// router, a real PrefillNode behind the real PrefillServiceImpl (in-process fake KV transport;
// reached through a proxy that holds its answers back), a fake decode node. The prefill node
// answers a Prefill, and the answer is held back until the router's cancellation (client cancel, or
// the client's deadline) reaches the node, so the router's call ends CANCELLED / DEADLINE_EXCEEDED
// while the node holds a lease on the request's KV that no KvHandle names. The router must release
// it by request id: the node's leases and blocks go back to zero long before the lease (60 s) would
// expire. Every wait is bounded.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv_transfer/fake/fake_kv_source.h"
#include "model/tools/synthetic_model.h"
#include "prefill_node/prefill_node.h"
#include "prefill_node/prefill_service.h"
#include "router/router_server.h"
#include "serving/loopback_server.h"
#include "tandem/v1/prefill.grpc.pb.h"
#include "tandem/v1/router.grpc.pb.h"
#include "tests/router/fake_nodes.h"
#include "tests/router/test_model.h"

namespace tandem::testing_router {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);  // bound of every wait
constexpr absl::Duration kLease = absl::Seconds(60);
// "Well before the lease": the release must land within this (a lease would take 60 s).
constexpr absl::Duration kReleasedWithin = absl::Seconds(5);

// The real PrefillServiceImpl (served apart, on a loopback server, and called through it),
// except that a Prefill's answer is held until the caller's cancellation (or deadline) has
// reached this node: the answer is "in flight" when the router gives up on the call.
class AnswerHeldBack final : public v1::PrefillService::Service {
 public:
  explicit AnswerHeldBack(const std::string& real_address)
      : real_(v1::PrefillService::NewStub(
            grpc::CreateChannel(real_address, grpc::InsecureChannelCredentials()))) {}

  grpc::Status Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* req,
                       v1::PrefillResponse* resp) override {
    grpc::ClientContext call;
    call.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    const grpc::Status status = real_->Prefill(&call, *req, resp);
    if (status.ok()) answered_ok_.Notify();
    const absl::Time give_up = absl::Now() + kWait;
    while (!ctx->IsCancelled() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));  // polling an observed condition, bounded
    }
    return status;
  }
  grpc::Status ReleaseKv(grpc::ServerContext*, const v1::ReleaseKvRequest* req,
                         v1::ReleaseKvResponse* resp) override {
    {
      absl::MutexLock lock(&mu_);
      releases_.push_back(*req);
    }
    grpc::ClientContext call;
    call.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    return real_->ReleaseKv(&call, *req, resp);
  }
  grpc::Status RenewLease(grpc::ServerContext*, const v1::RenewLeaseRequest* req,
                          v1::RenewLeaseResponse* resp) override {
    grpc::ClientContext call;
    call.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    return real_->RenewLease(&call, *req, resp);
  }
  grpc::Status GetTransferMetadata(grpc::ServerContext*, const v1::GetTransferMetadataRequest* req,
                                   v1::TransferMetadata* resp) override {
    grpc::ClientContext call;
    call.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    return real_->GetTransferMetadata(&call, *req, resp);
  }
  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest* req,
                      v1::InstanceStatus* resp) override {
    grpc::ClientContext call;
    call.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    return real_->Status(&call, *req, resp);
  }

  absl::Notification& answered_ok() { return answered_ok_; }
  std::vector<v1::ReleaseKvRequest> releases() const {
    absl::MutexLock lock(&mu_);
    return releases_;
  }

 private:
  const std::unique_ptr<v1::PrefillService::Stub> real_;
  absl::Notification answered_ok_;
  mutable absl::Mutex mu_;
  std::vector<v1::ReleaseKvRequest> releases_ ABSL_GUARDED_BY(mu_);
};

enum class GiveUp { kClientCancel, kClientDeadline };

class PrefillCancelRaceTest : public ::testing::TestWithParam<GiveUp> {
 protected:
  void SetUp() override {
    model_path_ = absl::StrCat(::testing::TempDir(), "/prefill_cancel_race_", getpid(), ".gguf");
    ASSERT_TRUE(WriteSyntheticModel(SyntheticModelOptions{}, model_path_).ok());
    PrefillNodeOptions o;
    o.model_path = model_path_;
    o.model_name = kTestModelName;
    o.advertised_address = "prefill:1";
    o.instance.parallel = ParallelConfig{1, 1, 1, 16, 16};
    o.instance.threads_per_rank = 1;
    o.instance.kv_bytes_per_rank = 1 << 20;
    o.default_lease = kLease;
    o.sources = fake::FakeSourceFactory(&net_);
    absl::StatusOr<std::unique_ptr<PrefillNode>> node = PrefillNode::Create(o);
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    real_.SetNode(node_.get());
    std::string real_address;
    real_server_ = StartLoopbackServer(&real_, &real_address);
    ASSERT_NE(real_server_, nullptr);
    held_ = std::make_unique<AnswerHeldBack>(real_address);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(held_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);

    decode_ = std::make_unique<FakeDecode>("d0", std::make_shared<DecodeScript>());
    RouterOptions options;
    options.listen = "127.0.0.1:0";
    options.prefill_nodes = {absl::StrCat("127.0.0.1:", port)};
    options.decode_nodes = {decode_->address()};
    options.health_interval = absl::Milliseconds(50);
    options.rpc_timeout = absl::Seconds(5);
    options.decode_idle_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<RouterServer>> router =
        RouterServer::Start(options, MakeTestModel(256), [](const std::string&) {});
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    stub_ = v1::Router::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", router_->port()),
                                                    grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (router_ != nullptr) router_->Shutdown(absl::Seconds(2));
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    StopLoopbackServer(real_server_.get(), absl::Seconds(2));
    node_.reset();
    std::remove(model_path_.c_str());
  }

  // Polls the node until it holds no lease and every block is free, within `bound`.
  bool NodeIdleWithin(absl::Duration bound) {
    const absl::Time deadline = absl::Now() + bound;
    while (absl::Now() < deadline) {
      const NodeLoad load = node_->Load();
      if (load.leases == 0 && load.free_blocks == load.total_blocks) return true;
      absl::SleepFor(absl::Milliseconds(5));  // polling an observed condition, bounded
    }
    return false;
  }

  std::string model_path_;
  fake::FakeKvNetwork net_;
  std::unique_ptr<PrefillNode> node_;
  PrefillServiceImpl real_;
  std::unique_ptr<grpc::Server> real_server_;  // serves real_ to held_
  std::unique_ptr<AnswerHeldBack> held_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<FakeDecode> decode_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<v1::Router::Stub> stub_;
};

TEST_P(PrefillCancelRaceTest, LeaseOfAnAnswerInFlightIsReleasedLongBeforeItExpires) {
  v1::GenerateRequest request;
  request.set_request_id("race-1");
  request.set_text("hello there");
  request.set_max_tokens(4);
  grpc::ClientContext ctx;
  // With a deadline the client gives up by itself; the prefill of a few tokens on the tiny
  // synthetic model takes milliseconds, so it answers well within 3 s (checked below).
  ctx.set_deadline(absl::ToChronoTime(
      absl::Now() + (GetParam() == GiveUp::kClientDeadline ? absl::Seconds(3) : kWait)));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub_->Generate(&ctx, request);

  // The node answered (and took a lease) but the answer has not left it.
  ASSERT_TRUE(held_->answered_ok().WaitForNotificationWithTimeout(kWait))
      << "the prefill node never answered the Prefill call OK";
  EXPECT_EQ(node_->Load().leases, 1);
  if (GetParam() == GiveUp::kClientCancel) ctx.TryCancel();

  v1::GenerateResponse response;
  int tokens = 0;
  while (reader->Read(&response)) tokens += response.has_token() ? 1 : 0;
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(tokens, 0);  // the first token was in the answer that never arrived
  EXPECT_EQ(status.error_code(), GetParam() == GiveUp::kClientCancel
                                     ? grpc::StatusCode::CANCELLED
                                     : grpc::StatusCode::DEADLINE_EXCEEDED)
      << status.error_message();

  EXPECT_TRUE(NodeIdleWithin(kReleasedWithin))
      << "leases " << node_->Load().leases << ", free blocks " << node_->Load().free_blocks
      << " of " << node_->Load().total_blocks;
  const NodeLoad load = node_->Load();
  EXPECT_EQ(load.leases_released_total + load.leases_released_early_total, 1);
  EXPECT_EQ(load.leases_expired_total, 0);
  const std::vector<v1::ReleaseKvRequest> releases = held_->releases();
  std::string ids;
  for (const v1::ReleaseKvRequest& r : releases) absl::StrAppend(&ids, " ", r.request_id());
  // One: a retry the router starts after the client's deadline never reached the node.
  ASSERT_EQ(releases.size(), 1u) << "released:" << ids;
  EXPECT_THAT(releases[0].request_id(), ::testing::StartsWith("race-1#"));
  EXPECT_EQ(releases[0].generation(), 0u);  // by request id: the router never saw the handle
}

INSTANTIATE_TEST_SUITE_P(RouterGivesUp, PrefillCancelRaceTest,
                         ::testing::Values(GiveUp::kClientCancel, GiveUp::kClientDeadline),
                         [](const ::testing::TestParamInfo<GiveUp>& info) {
                           return info.param == GiveUp::kClientCancel ? "ClientCancel"
                                                                      : "ClientDeadline";
                         });

}  // namespace
}  // namespace tandem::testing_router
