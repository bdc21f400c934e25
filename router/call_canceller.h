// Propagates a client's cancellation to the one outgoing call a request has in flight.
//
// The Generate reactor calls Cancel() from gRPC's OnCancel (client cancelled, deadline passed,
// connection lost, server shutting down); the request thread registers each outgoing call's
// ClientContext while the call is in flight. Cancel() marks the request cancelled and calls
// TryCancel on the registered context; registering after Cancel() cancels the call at once, so
// there is no window in which a cancellation is lost.
//
// Thread-safety: all methods are thread-safe. A registered context must outlive its
// Registration.
#pragma once

#include <grpcpp/client_context.h>

#include "absl/synchronization/mutex.h"

namespace tandem {

class CallCanceller {
 public:
  CallCanceller() = default;
  CallCanceller(const CallCanceller&) = delete;
  CallCanceller& operator=(const CallCanceller&) = delete;

  void Cancel();
  bool cancelled() const;

  class Registration {
   public:
    Registration(CallCanceller* owner, grpc::ClientContext* context);
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    CallCanceller* const owner_;
  };

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace tandem
