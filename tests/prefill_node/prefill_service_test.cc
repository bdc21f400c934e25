// prefill_node/prefill_service.h over gRPC (loopback, callback API), with a real PrefillNode on
// the in-process fake transport: a Prefill answers with its handle and the unary calls around it
// answer; a client's cancel reaches a Prefill blocked waiting for KV capacity (for up to an hour)
// and a WatchKv waiting for the next chunk of a long pipelined prefill through their reactors'
// OnCancel, and ends them at once; the bound on call threads refuses calls past it. Every wait is
// bounded (kBound, 20 s: far below the hour a missed cancel would take).
#include "prefill_node/prefill_service.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "serving/loopback_server.h"
#include "tandem/v1/prefill.grpc.pb.h"
#include "tests/prefill_node/prefill_node_fixture.h"
#include "tests/serving/rpc_on_thread.h"

namespace tandem::testing {
namespace {

constexpr absl::Duration kHour = absl::Hours(1);
// A 37-token prompt takes three 16-token blocks: with four, a second one waits for capacity.
constexpr int32_t kSmallPoolBlocks = 4;

std::vector<int32_t> Prompt(int32_t n) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < n; ++i) prompt.push_back(10 + (i * 7) % 250);
  return prompt;
}

v1::PrefillRequest RequestFor(const std::string& id, const std::vector<int32_t>& prompt) {
  v1::PrefillRequest req;
  req.set_request_id(id);
  for (int32_t t : prompt) req.add_prompt_ids(t);
  req.set_max_new_tokens(8);
  return req;
}

// One Prefill call on a thread of its own; `result` holds its response.
struct PrefillCallOnThread : RpcOnThread<v1::PrefillResponse> {
  void Start(v1::PrefillService::Stub& stub, const v1::PrefillRequest& req) {
    RpcOnThread::Start([&stub, req](grpc::ClientContext* ctx, v1::PrefillResponse* resp) {
      return stub.Prefill(ctx, req, resp);
    });
  }
};

class PrefillServiceTest : public PrefillNodeTest {
 protected:
  // A tp-1 node with `blocks` 16-token blocks (0: 4 MiB of them, 512), leases and queue timeout of
  // an hour (only a cancel or a release ends a wait early) and `chunk` prompt tokens per step,
  // behind a service allowed `max_call_threads` calls at once, on a loopback server.
  void Serve(int32_t blocks, int64_t chunk = 2048,
             int64_t max_call_threads = kDefaultMaxCallThreads) {
    PrefillNodeOptions o;
    o.model_path = *model_path_;
    o.advertised_address = "prefill:1";
    o.instance.parallel = ParallelConfig{1, 1, 1, 16, 16};
    o.instance.threads_per_rank = 1;
    o.instance.kv_bytes_per_rank = 4 << 20;
    o.default_lease = kHour;
    o.prefix_cache = false;
    o.prefill.queue_timeout = kHour;
    o.prefill.max_prefill_tokens = chunk;
    o.engine_id = absl::StrCat("p", next_engine_++);
    o.sources = fake::FakeSourceFactory(&net_);
    if (blocks > 0) {
      absl::StatusOr<std::unique_ptr<PrefillNode>> probe = PrefillNode::Create(o);
      ASSERT_OK(probe);
      o.instance.kv_bytes_per_rank = (int64_t{4} << 20) / (*probe)->Load().total_blocks * blocks;
      o.engine_id = absl::StrCat("p", next_engine_++);
    }
    absl::StatusOr<std::unique_ptr<PrefillNode>> node = PrefillNode::Create(o);
    ASSERT_OK(node);
    node_ = *std::move(node);
    if (blocks > 0) {
      ASSERT_EQ(node_->Load().total_blocks, blocks);
    }
    service_ = std::make_unique<PrefillServiceImpl>(max_call_threads);
    service_->SetNode(node_.get());
    std::string address;
    server_ = StartLoopbackServer(service_.get(), &address);
    ASSERT_NE(server_, nullptr);
    stub_ = v1::PrefillService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    StopLoopbackServer(server_.get(), absl::Seconds(2));
    if (server_ != nullptr) server_->Wait();
    service_.reset();  // joins the call threads
    node_.reset();
  }

  // The node holds no lease and every block is free.
  bool NodeIdle() {
    return WaitFor([&] {
      const NodeLoad l = node_->Load();
      return l.leases == 0 && l.free_blocks == l.total_blocks;
    });
  }

  std::unique_ptr<PrefillNode> node_;
  std::unique_ptr<PrefillServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::PrefillService::Stub> stub_;
};

TEST_F(PrefillServiceTest, PrefillAnswersWithItsHandleAndTheUnaryCallsAnswer) {
  Serve(/*blocks=*/0);
  PrefillCallOnThread call;
  call.Start(*stub_, RequestFor("r1", Prompt(37)));
  ASSERT_TRUE(call.ended.WaitForNotificationWithTimeout(kBound));
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_EQ(call.result.kv().num_tokens(), 37);
  EXPECT_EQ(call.result.kv().block_table_size(), 3);
  EXPECT_EQ(call.result.kv().engine_id(), node_->engine_id());
  EXPECT_EQ(node_->Load().leases, 1);

  grpc::ClientContext renew_ctx;
  v1::RenewLeaseRequest renew;
  renew.set_request_id("r1");
  renew.set_generation(call.result.kv().generation());
  renew.set_extend_ms(1000);
  v1::RenewLeaseResponse renewed;
  ASSERT_TRUE(stub_->RenewLease(&renew_ctx, renew, &renewed).ok());
  EXPECT_TRUE(renewed.renewed());

  grpc::ClientContext md_ctx;
  v1::TransferMetadata metadata;
  ASSERT_TRUE(
      stub_->GetTransferMetadata(&md_ctx, v1::GetTransferMetadataRequest(), &metadata).ok());
  EXPECT_EQ(metadata.engine_id(), node_->engine_id());

  grpc::ClientContext release_ctx;
  v1::ReleaseKvRequest release;
  release.set_request_id("r1");
  release.set_epoch(node_->epoch());
  release.set_generation(call.result.kv().generation());
  v1::ReleaseKvResponse released;
  ASSERT_TRUE(stub_->ReleaseKv(&release_ctx, release, &released).ok());
  EXPECT_TRUE(released.lease_held());

  grpc::ClientContext status_ctx;
  v1::InstanceStatus status;
  ASSERT_TRUE(stub_->Status(&status_ctx, v1::StatusRequest(), &status).ok());
  EXPECT_EQ(status.role(), v1::INSTANCE_ROLE_PREFILL);
  EXPECT_EQ(status.load().leases(), 0);
  EXPECT_TRUE(WaitFor([&] { return service_->calls_running() == 0; }));
  EXPECT_TRUE(NodeIdle());
}

TEST_F(PrefillServiceTest, ClientCancelWhilePrefillWaitsForCapacityEndsTheCallAtOnce) {
  Serve(kSmallPoolBlocks);
  absl::StatusOr<PrefillOutcome> first =
      node_->Prefill(TestCall("r1", Prompt(37), 8), CancellationToken());  // 3 of 4 blocks
  ASSERT_OK(first);
  PrefillCallOnThread call;  // no deadline: only the cancel can end its hour-long wait
  call.Start(*stub_, RequestFor("r2", Prompt(37)));
  ASSERT_TRUE(WaitFor([&] { return node_->Load().queued == 1; }));
  EXPECT_EQ(service_->calls_running(), 1);
  call.ctx.TryCancel();
  ASSERT_TRUE(call.ended.WaitForNotificationWithTimeout(kBound));
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::CANCELLED);
  // The node's side: the engine dropped the waiting prompt, the call's thread and admission
  // pass are gone — within kBound of an hour-long wait.
  EXPECT_TRUE(WaitFor([&] {
    return service_->calls_running() == 0 && service_->drain_gate().in_flight() == 0 &&
           node_->Load().queued == 0;
  }));
  EXPECT_EQ(node_->Load().leases, 1);  // r1's only
  EXPECT_TRUE(node_->ReleaseKv("r1", node_->epoch(), first->generation));
  EXPECT_TRUE(NodeIdle());
}

TEST_F(PrefillServiceTest, ClientCancelWhileWatchKvWaitsForTheNextChunkEndsTheWatchAtOnce) {
  // One prompt token per step, in arrival order: three 2,000-token pipelined prefills ahead of
  // the watched one keep it at 0 tokens ready for 6,000 steps, far longer than the cancel takes
  // to arrive (and than a heartbeat).
  Serve(/*blocks=*/0, /*chunk=*/1);
  std::vector<std::pair<std::string, uint64_t>> leases;
  for (const char* id : {"a1", "a2", "a3", "r"}) {
    absl::StatusOr<PrefillOutcome> early = node_->StartPipelined(
        TestCall(id, Prompt(id[0] == 'r' ? 100 : 2000), 8), CancellationToken());
    ASSERT_OK(early);
    leases.emplace_back(id, early->generation);
  }
  const uint64_t generation = leases.back().second;
  absl::StatusOr<std::shared_ptr<const KvProgress>> progress = node_->WatchKv("r", generation);
  ASSERT_OK(progress);

  grpc::ClientContext ctx;  // no deadline: only the cancel (or the prefill's end) ends the watch
  v1::WatchKvRequest req;
  req.set_request_id("r");
  req.set_generation(generation);
  std::unique_ptr<grpc::ClientReader<v1::KvProgress>> reader = stub_->WatchKv(&ctx, req);
  v1::KvProgress first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ(first.tokens_ready(), 0);
  EXPECT_FALSE(first.done());
  EXPECT_EQ(service_->calls_running(), 1);
  const absl::Time cancelled = absl::Now();
  ctx.TryCancel();
  // The watch's thread ends while the watched prefill has still not moved, and before its next
  // heartbeat is due (a failed heartbeat write would end it too, kWatchHeartbeat after the first
  // message): the cancel woke its wait for the next chunk.
  EXPECT_TRUE(WaitFor([&] { return service_->calls_running() == 0; }));
  EXPECT_LT(absl::Now() - cancelled, kWatchHeartbeat / 2) << "not woken by the cancel";
  EXPECT_EQ((*progress)->Get().tokens_ready, 0) << "the watch ended only once the prefill moved";
  v1::KvProgress more;
  while (reader->Read(&more)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  for (const auto& [id, gen] : leases) {
    EXPECT_TRUE(node_->ReleaseKv(id, node_->epoch(), gen));  // stops its prefill
  }
  EXPECT_TRUE(NodeIdle());
}

TEST_F(PrefillServiceTest, CallsPastTheThreadBoundAreResourceExhausted) {
  Serve(kSmallPoolBlocks, /*chunk=*/2048, /*max_call_threads=*/1);
  absl::StatusOr<PrefillOutcome> first =
      node_->Prefill(TestCall("r1", Prompt(37), 8), CancellationToken());
  ASSERT_OK(first);
  PrefillCallOnThread waiting;  // holds the one call thread while it waits for capacity
  waiting.Start(*stub_, RequestFor("r2", Prompt(37)));
  ASSERT_TRUE(WaitFor([&] { return node_->Load().queued == 1; }));
  PrefillCallOnThread refused;
  refused.Start(*stub_, RequestFor("r3", Prompt(37)));
  ASSERT_TRUE(refused.ended.WaitForNotificationWithTimeout(kBound));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("calls at once (1)"));
  EXPECT_EQ(service_->drain_gate().in_flight(), 1);  // the refused call's pass was returned
  waiting.ctx.TryCancel();
  ASSERT_TRUE(waiting.ended.WaitForNotificationWithTimeout(kBound));
  EXPECT_TRUE(node_->ReleaseKv("r1", node_->epoch(), first->generation));
  EXPECT_TRUE(NodeIdle());
}

}  // namespace
}  // namespace tandem::testing
