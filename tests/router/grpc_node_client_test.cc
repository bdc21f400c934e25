// GrpcNodeClient::Prefill (router/grpc_node_client.h) and the request's CancellationToken, against
// a loopback PrefillService that never answers on its own: a token cancelled before the call
// starts stops it at once (no window in which a cancellation is lost), and one cancelled while
// the call waits stops it then — both end CANCELLED long before the call's deadline, and the
// node sees the cancellation. Without a token the call waits for its deadline.
#include "router/grpc_node_client.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/cancellation.h"
#include "tandem/v1/prefill.grpc.pb.h"
#include "tests/router/loopback_node_test.h"

namespace tandem {
namespace {

// Holds every Prefill until the caller cancels it (or its deadline passes), counting arrivals
// and cancellations.
class SilentPrefill final : public v1::PrefillService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext*, const v1::PrefillRequest*,
                                    v1::PrefillResponse*) override {
    {
      absl::MutexLock lock(&mu_);
      ++arrived_;
    }
    return new Held(this);
  }

  // Waits (bounded) until `n` calls arrived / were cancelled.
  bool AwaitArrived(int n) { return Await(&arrived_, n); }
  bool AwaitCancelled(int n) { return Await(&cancelled_, n); }

 private:
  class Held final : public grpc::ServerUnaryReactor {
   public:
    explicit Held(SilentPrefill* owner) : owner_(owner) {}
    void OnCancel() override {
      {
        absl::MutexLock lock(&owner_->mu_);
        ++owner_->cancelled_;
      }
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
    void OnDone() override { delete this; }

   private:
    SilentPrefill* const owner_;
  };

  bool Await(const int* count, int n) {
    absl::MutexLock lock(&mu_);
    const auto reached = [count, n]() { return *count >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(10));
  }

  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

class GrpcNodeClientTest : public LoopbackNodeTest<SilentPrefill> {
 protected:
  absl::StatusOr<v1::PrefillResponse> Prefill(absl::Time deadline,
                                              const CancellationToken* cancel) {
    v1::PrefillRequest request;
    request.set_request_id("r1");
    return client_.Prefill(node_, std::move(request), deadline, "r1", cancel);
  }
};

// The call's deadline is further away than kPrompt: only the cancellation ends these calls in
// time (a call that missed it fails at its deadline, inside the test's timeout).
constexpr absl::Duration kFar = absl::Seconds(45);
constexpr absl::Duration kPrompt = absl::Seconds(30);  // "at once", on a loaded machine

TEST_F(GrpcNodeClientTest, ATokenCancelledBeforeTheCallStopsItAtOnce) {
  CancellationToken cancel;
  cancel.Cancel();
  const absl::Time began = absl::Now();
  const absl::StatusOr<v1::PrefillResponse> response = Prefill(began + kFar, &cancel);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kCancelled) << response.status();
  EXPECT_LT(absl::Now() - began, kPrompt);
}

TEST_F(GrpcNodeClientTest, ATokenCancelledWhileTheCallWaitsStopsItAndTheNodeSeesIt) {
  CancellationToken cancel;
  std::thread client([&] {
    if (service_.AwaitArrived(1)) cancel.Cancel();
  });
  const absl::Time began = absl::Now();
  const absl::StatusOr<v1::PrefillResponse> response = Prefill(began + kFar, &cancel);
  client.join();
  EXPECT_EQ(response.status().code(), absl::StatusCode::kCancelled) << response.status();
  EXPECT_LT(absl::Now() - began, kPrompt);
  EXPECT_TRUE(service_.AwaitCancelled(1));
}

TEST_F(GrpcNodeClientTest, WithoutATokenTheCallEndsAtItsDeadline) {
  const absl::StatusOr<v1::PrefillResponse> response =
      Prefill(absl::Now() + absl::Milliseconds(200), nullptr);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded) << response.status();
}

}  // namespace
}  // namespace tandem
