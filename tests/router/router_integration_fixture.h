// The fixture of the router integration tests (router_integration_test.cc,
// router_integration_cluster_test.cc; one binary): the real router library, served on
// 127.0.0.1:0 with real gRPC, against fake prefill/decode nodes in this process (fake_nodes.h).
// Every wait is a bounded wait on a condition.
#pragma once
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/prometheus_text.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"
#include "router/router_server.h"
#include "router/unary_call.h"
#include "tandem/v1/router.grpc.pb.h"
#include "tests/router/fake_nodes.h"
#include "tests/router/test_model.h"

namespace tandem::testing_router {

using testing::ElementsAre;
using testing::ElementsAreArray;
using testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);  // bound of every wait in these tests
constexpr int64_t kContext = 64;

struct Reply {
  std::vector<v1::TokenChunk> tokens;
  std::optional<v1::GenerateFinal> final;
  grpc::Status status;
};

inline std::vector<int32_t> Ids(const std::vector<v1::TokenChunk>& tokens) {
  std::vector<int32_t> ids;
  for (const v1::TokenChunk& t : tokens) ids.push_back(t.id());
  return ids;
}

inline std::vector<int32_t> Expected(int n, int from = 0) {
  std::vector<int32_t> ids;
  for (int i = from; i < n; ++i) ids.push_back(TokenForStep(i));
  return ids;
}

class RouterIntegrationTest : public testing::Test {
 protected:
  // Starts the router over the given fakes (nullptr entries are skipped); extra addresses
  // (e.g. of nothing) may be appended to the decode list.
  void StartRouter(const std::vector<FakePrefill*>& prefills,
                   const std::vector<FakeDecode*>& decodes,
                   std::vector<std::string> extra_decode = {}) {
    RouterOptions options;
    options.listen = "127.0.0.1:0";
    for (FakePrefill* p : prefills) options.prefill_nodes.push_back(p->address());
    for (FakeDecode* d : decodes) options.decode_nodes.push_back(d->address());
    for (std::string& a : extra_decode) options.decode_nodes.push_back(std::move(a));
    options.health_interval = absl::Milliseconds(50);
    options.rpc_timeout = absl::Seconds(5);
    options.decode_idle_timeout = absl::Seconds(5);
    options.max_attempts = 3;
    options.retry.wait_budget = wait_budget_;
    options.strict = router_strict_;
    std::unique_ptr<ServedModel> model = MakeTestModel(kContext);
    ASSERT_NE(model, nullptr);
    absl::StatusOr<std::unique_ptr<RouterServer>> router =
        RouterServer::Start(options, std::move(model), [this](const std::string& line) {
          absl::MutexLock lock(&log_mu_);
          log_.push_back(line);
        });
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", router_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Router::NewStub(channel_);
  }

  void TearDown() override {
    if (router_ != nullptr) router_->Shutdown(absl::Seconds(2));
  }

  v1::ClusterStatusResponse Cluster() {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    v1::ClusterStatusResponse response;
    const grpc::Status status = stub_->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // Polls ClusterStatus until `pred` holds or kWait passes.
  template <typename Pred>
  bool WaitForCluster(Pred pred) {
    const absl::Time deadline = absl::Now() + kWait;
    while (absl::Now() < deadline) {
      if (pred(Cluster())) return true;
      // Polling interval for an observed condition, not synchronisation by sleeping.
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  bool WaitAllHealthy(int n) {
    return WaitForCluster([n](const v1::ClusterStatusResponse& c) {
      int healthy = 0;
      for (const v1::NodeStatus& node : c.nodes()) healthy += node.healthy() ? 1 : 0;
      return c.nodes_size() == n && healthy == n;
    });
  }

  static v1::GenerateRequest TextRequest(const std::string& text, int max_tokens) {
    v1::GenerateRequest r;
    r.set_text(text);
    r.set_max_tokens(max_tokens);
    return r;
  }

  // `with_deadline` false sends no deadline at all (the router must still bound its calls).
  Reply Generate(const v1::GenerateRequest& request, bool with_deadline = true) {
    grpc::ClientContext ctx;
    if (with_deadline) ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    Reply reply;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&ctx, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_token()) reply.tokens.push_back(response.token());
      if (response.has_final()) reply.final = response.final();
    }
    reply.status = reader->Finish();
    return reply;
  }

  std::vector<std::string> Log() {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

  std::shared_ptr<PrefillScript> prefill_script_ = std::make_shared<PrefillScript>();
  std::shared_ptr<DecodeScript> decode_script_ = std::make_shared<DecodeScript>();
  // How long a request waits for a healthy node of a role (RetryPolicy::wait_budget).
  absl::Duration wait_budget_ = absl::Milliseconds(300);
  bool router_strict_ = false;  // RouterOptions::strict (--strict)
  std::unique_ptr<RouterServer> router_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Router::Stub> stub_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

}  // namespace tandem::testing_router
