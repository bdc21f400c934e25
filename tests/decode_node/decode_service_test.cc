// decode_node/decode_service.h over gRPC (loopback, callback API), with a real DecodeNode on
// the fakes of decode_node_fixture.h: a Decode call streams its tokens and finish event; a
// client's cancel reaches a call blocked in DecodeNode::Start (waiting for KV capacity for up to
// an hour) through the stream's OnCancel and ends it at once; draining and the bound on call
// threads refuse new calls. Every wait is bounded (kBound, 20 s: far below the hour a missed
// cancel would take).
#include "decode_node/decode_service.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "proto/convert/kv_handle_proto.h"
#include "serving/loopback_server.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tests/decode_node/decode_node_fixture.h"
#include "tests/serving/rpc_on_thread.h"

namespace tandem::testing {
namespace {

constexpr absl::Duration kHour = absl::Hours(1);

v1::DecodeRequest RequestFor(const KvHandle& kv, int32_t max_new_tokens) {
  v1::DecodeRequest req;
  req.set_request_id(kv.request_id);
  req.set_first_token(7);
  *req.mutable_kv() = ToProto(kv);
  req.set_max_new_tokens(max_new_tokens);
  req.set_next_step(1);
  return req;
}

// One Decode call read to its end on a thread of its own; `result` holds its events.
struct Call : RpcOnThread<std::vector<v1::DecodeEvent>> {
  void Start(v1::DecodeService::Stub& stub, const v1::DecodeRequest& req) {
    RpcOnThread::Start([&stub, req](grpc::ClientContext* ctx, std::vector<v1::DecodeEvent>* out) {
      std::unique_ptr<grpc::ClientReader<v1::DecodeEvent>> r = stub.Decode(ctx, req);
      v1::DecodeEvent ev;
      while (r->Read(&ev)) out->push_back(ev);
      return r->Finish();
    });
  }
};

class DecodeServiceTest : public DecodeNodeTest {
 protected:
  // The node (queue timeout an hour: only a cancel ends a capacity wait early) behind a service
  // allowed `max_call_threads` calls at once, on a loopback server.
  void Serve(int64_t max_call_threads = kDefaultMaxCallThreads) {
    node_ = NewNode(/*queue_timeout=*/kHour);
    ASSERT_NE(node_, nullptr);
    service_ = std::make_unique<DecodeServiceImpl>(max_call_threads);
    service_->SetNode(node_.get());
    std::string address;
    server_ = StartLoopbackServer(service_.get(), &address);
    ASSERT_NE(server_, nullptr);
    stub_ = v1::DecodeService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (holder_.joinable()) {
      net_.Resume("p-slow");
      holder_.join();
    }
    StopLoopbackServer(server_.get(), absl::Seconds(2));
    if (server_ != nullptr) server_->Wait();
    service_.reset();  // joins the call threads
    node_.reset();
  }

  // A request from the slow prefill holds 14 of the 16 blocks while its pull is paused (as in
  // decode_node_test's CapacityTest), so a 3-block request waits for capacity.
  void HoldCapacity() {
    net_.SetFaults("p-slow", FakeFaults{.paused = true});
    holder_ =
        std::thread([this] { held_ = Decode(*node_, prefill_->Lease(kSlow, "big", 200), 16); });
    ASSERT_TRUE(WaitFor([&] { return net_.paused_waiters("p-slow") == 2; }));
    ASSERT_EQ(node_->free_blocks(), 2);
  }
  void ReleaseCapacity() {
    net_.Resume("p-slow");
    holder_.join();
    EXPECT_OK(held_.started);
  }

  std::unique_ptr<DecodeNode> node_;
  std::unique_ptr<DecodeServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::DecodeService::Stub> stub_;
  std::thread holder_;
  Outcome held_;
};

TEST_F(DecodeServiceTest, StreamsTheTokensThenTheFinishEvent) {
  Serve();
  Call call;
  call.Start(*stub_, RequestFor(prefill_->Lease(kFast, "r1", 40), 6));
  ASSERT_TRUE(call.ended.WaitForNotificationWithTimeout(kBound));
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ASSERT_GE(call.result.size(), 2u);
  EXPECT_TRUE(call.result.front().has_served());  // on the first event only
  for (size_t i = 0; i + 1 < call.result.size(); ++i) {
    EXPECT_TRUE(call.result[i].has_token());
    EXPECT_EQ(call.result[i].has_served(), i == 0);
  }
  ASSERT_TRUE(call.result.back().has_finish());
  EXPECT_EQ(call.result.back().finish().generated(), 6);  // the first token (given) included
  EXPECT_EQ(call.result.size(), 6u);                      // 5 decoded tokens, then the finish
  EXPECT_TRUE(WaitFor([&] { return service_->calls_running() == 0; }));
  EXPECT_EQ(service_->drain_gate().in_flight(), 0);
  ExpectAllBlocksFree(*node_);
}

TEST_F(DecodeServiceTest, ClientCancelWhileStartWaitsForCapacityEndsTheCallAtOnce) {
  Serve();
  HoldCapacity();
  Call call;  // no deadline: only the cancel can end its hour-long capacity wait
  call.Start(*stub_, RequestFor(prefill_->Lease(kFast, "small", 40), 8));
  ASSERT_TRUE(WaitFor([&] { return node_->queued() == 2; }));  // the holder and the call
  EXPECT_EQ(service_->calls_running(), 1);
  call.ctx.TryCancel();
  ASSERT_TRUE(call.ended.WaitForNotificationWithTimeout(kBound));
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::CANCELLED);
  // The node's side: the capacity wait ended, the lease was released, the call's thread and
  // admission pass are gone — within kBound of an hour-long wait.
  EXPECT_TRUE(WaitFor([&] {
    return service_->calls_running() == 0 && service_->drain_gate().in_flight() == 0 &&
           node_->queued() == 1;
  }));
  EXPECT_EQ(prefill_->releases_held(), 1);
  EXPECT_EQ(node_->free_blocks(), 2);  // the holder's blocks only
  ReleaseCapacity();
  ExpectAllBlocksFree(*node_);
}

TEST_F(DecodeServiceTest, ClientCancelWhileThePullIsStuckEndsTheCallAtOnce) {
  Serve();
  net_.SetFaults("p-fast", FakeFaults{.paused = true});  // the pull never progresses
  Call call;
  call.Start(*stub_, RequestFor(prefill_->Lease(kFast, "r1", 40), 4));
  ASSERT_TRUE(WaitFor([&] { return net_.paused_waiters("p-fast") == 2; }));
  call.ctx.TryCancel();
  ASSERT_TRUE(call.ended.WaitForNotificationWithTimeout(kBound));
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return service_->calls_running() == 0; }));
  EXPECT_EQ(prefill_->releases_held(), 1);
  EXPECT_EQ(net_.bytes("p-fast"), 0);
  net_.Resume("p-fast");
  ExpectAllBlocksFree(*node_);
}

TEST_F(DecodeServiceTest, CallsPastTheThreadBoundAreResourceExhausted) {
  Serve(/*max_call_threads=*/1);
  HoldCapacity();
  Call waiting;  // holds the one call thread while it waits for capacity
  waiting.Start(*stub_, RequestFor(prefill_->Lease(kFast, "small", 40), 8));
  ASSERT_TRUE(WaitFor([&] { return node_->queued() == 2; }));
  Call refused;
  refused.Start(*stub_, RequestFor(prefill_->Lease(kFast, "other", 40), 8));
  ASSERT_TRUE(refused.ended.WaitForNotificationWithTimeout(kBound));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("most Decode calls at once (1)"));
  EXPECT_EQ(service_->drain_gate().in_flight(), 1);  // the refused call's pass was returned
  waiting.ctx.TryCancel();
  ASSERT_TRUE(waiting.ended.WaitForNotificationWithTimeout(kBound));
  ReleaseCapacity();
  ExpectAllBlocksFree(*node_);
}

TEST_F(DecodeServiceTest, DrainingRefusesNewCallsAndStatusSaysSo) {
  Serve();
  service_->drain_gate().StartDrain();
  Call call;
  call.Start(*stub_, RequestFor(prefill_->Lease(kFast, "r1", 40), 4));
  ASSERT_TRUE(call.ended.WaitForNotificationWithTimeout(kBound));
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(call.status.error_message(), HasSubstr("draining"));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kBound));
  v1::InstanceStatus status;
  ASSERT_TRUE(stub_->Status(&ctx, v1::StatusRequest(), &status).ok());
  EXPECT_TRUE(status.draining());
  EXPECT_EQ(status.role(), v1::INSTANCE_ROLE_DECODE);
  EXPECT_EQ(status.load().total_blocks(), kBlocks);
}

}  // namespace
}  // namespace tandem::testing
