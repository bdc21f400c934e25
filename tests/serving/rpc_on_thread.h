// A gRPC call run on a thread of its own, so a test can cancel it (ctx.TryCancel()) and wait for
// its end with a bound (ended). `result` is what the call hands back (a unary response, a
// stream's messages); `status` its final status. The destructor cancels the call and joins, so a
// test that failed early never waits for an hour-long call.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"

namespace tandem::testing {

template <typename Result>
struct RpcOnThread {
  grpc::ClientContext ctx;
  Result result;
  grpc::Status status;
  absl::Notification ended;
  std::thread thread;

  // Runs `call(&ctx, &result)` on the thread; its status is `status` once `ended` is notified.
  void Start(std::function<grpc::Status(grpc::ClientContext*, Result*)> call) {
    thread = std::thread([this, call = std::move(call)] {
      status = call(&ctx, &result);
      ended.Notify();
    });
  }
  ~RpcOnThread() {
    ctx.TryCancel();
    if (thread.joinable()) thread.join();
  }
};

}  // namespace tandem::testing
