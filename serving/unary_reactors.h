// Unary calls on gRPC's callback API (grpc::ServerUnaryReactor), as the node services answer them.
//
// FinishUnary: a call answered at once, on gRPC's callback thread — for calls that do not block
// (Status, ReleaseKv, RenewLease, GetTransferMetadata).
//
// CancellableUnaryReactor: a call whose work blocks and so runs on a thread of its own
// (serving/call_threads.h). gRPC's OnCancel — the client cancelled, its deadline passed, the
// server is shutting down — cancels the call's CancellationToken (common/cancellation.h), which
// the work waits on: no poll. Created with new by the method handler (and returned to gRPC),
// deleted in OnDone, which gRPC calls only after Finish; Finish is the work thread's last touch
// of the reactor (it may delete it inline). REQUIRES: every CancelCallback registered on cancel()
// is destroyed before Finish.
//
// Thread-safety: Finish once, from any thread; cancel() from any thread.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

#include <utility>

#include "common/cancellation.h"

namespace tandem {

// A unary callback call answered with `status` at once.
inline grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                             grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

class CancellableUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  const CancellationToken& cancel() const { return cancel_; }
  void OnCancel() override { cancel_.Cancel(); }
  void OnDone() override { delete this; }

 private:
  CancellationToken cancel_;
};

}  // namespace tandem
