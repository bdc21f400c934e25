// Propagates a client's cancellation to the one outgoing call a request has in flight.
//
// The Generate reactor (or the HTTP handler) calls Cancel() when the client goes away (client
// cancelled, deadline passed, connection lost, server shutting down); the request thread
// registers each outgoing call (a Cancellable: node_client.h's calls) while it is in flight.
// Cancel() marks the request cancelled and cancels the registered call; registering after
// Cancel() cancels the call at once, so there is no window in which a cancellation is lost.
//
// Thread-safety: all methods are thread-safe. A registered call must outlive its Registration.
#pragma once

#include "absl/synchronization/mutex.h"

namespace tandem {

// A call in flight that can be asked to stop (from any thread). Cancel must not call back into
// the CallCanceller.
class Cancellable {
 public:
  virtual ~Cancellable() = default;
  virtual void Cancel() = 0;
};

class CallCanceller {
 public:
  CallCanceller() = default;
  CallCanceller(const CallCanceller&) = delete;
  CallCanceller& operator=(const CallCanceller&) = delete;

  void Cancel();
  bool cancelled() const;

  class Registration {
   public:
    Registration(CallCanceller* owner, Cancellable* call);
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    CallCanceller* const owner_;
  };

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  Cancellable* active_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace tandem
