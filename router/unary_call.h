// A unary RPC issued through gRPC's callback API and awaited with a bound, so that a request
// thread can wait for it and a client's cancellation can still stop it (CancellationToken).
//
//   UnaryCall<v1::PrefillRequest, v1::PrefillResponse> call(std::move(req), deadline);
//   call.Start([&](auto* ctx, auto* req, auto* resp, auto done) {
//     stub->async()->Prefill(ctx, req, resp, std::move(done));
//   });
//   CancelCallback on_cancel = token.OnCancel([ctx = call.context()] { ctx->TryCancel(); });
//   absl::StatusOr<v1::PrefillResponse> r = call.Wait();
//
// The context, request and response live in a block shared with the completion callback, so
// abandoning a call (destroying the UnaryCall before gRPC completes it) is safe: the destructor
// cancels the call and gRPC frees the block when the callback has run.
//
// Thread-safety: Start and Wait from one thread; context() may be cancelled from any thread.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>
#include <grpcpp/support/time.h>

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "serving/grpc_status.h"

namespace tandem {

// How long a call may take to report completion after its deadline or a cancellation before
// the waiter gives up on it (gRPC normally completes it within milliseconds).
inline constexpr absl::Duration kCallCompletionGrace = absl::Seconds(2);

template <typename Request, typename Response>
class UnaryCall {
 public:
  using Done = std::function<void(grpc::Status)>;

  UnaryCall(Request request, absl::Time deadline)
      : state_(std::make_shared<State>()), deadline_(deadline) {
    state_->request = std::move(request);
    state_->context.set_deadline(absl::ToChronoTime(deadline));
  }
  ~UnaryCall() {
    if (started_) state_->context.TryCancel();
  }
  UnaryCall(const UnaryCall&) = delete;
  UnaryCall& operator=(const UnaryCall&) = delete;

  grpc::ClientContext* context() { return &state_->context; }

  // `start(context, request, response, done)` issues the call.
  template <typename StartFn>
  void Start(StartFn start) {
    started_ = true;
    std::shared_ptr<State> state = state_;
    start(&state->context, &state->request, &state->response, Done([state](grpc::Status status) {
      absl::MutexLock lock(&state->mu);
      state->status = std::move(status);
      state->done = true;
    }));
  }

  // The response, or the call's status (CANCELLED after TryCancel, DEADLINE_EXCEEDED, ...).
  // Waits at most until the deadline plus kCallCompletionGrace, then cancels the call and
  // waits one more grace period before reporting DEADLINE_EXCEEDED itself.
  absl::StatusOr<Response> Wait() {
    State& s = *state_;
    const absl::Condition done(&s.done);
    bool completed;
    {
      absl::MutexLock lock(&s.mu);
      completed = s.mu.AwaitWithDeadline(done, deadline_ + kCallCompletionGrace);
    }
    if (!completed) {
      s.context.TryCancel();
      absl::MutexLock lock(&s.mu);
      if (!s.mu.AwaitWithTimeout(done, kCallCompletionGrace)) {
        return absl::DeadlineExceededError(
            "call did not complete after its deadline and a cancellation");
      }
    }
    absl::MutexLock lock(&s.mu);
    if (!s.status.ok()) return FromGrpcStatus(s.status);
    return std::move(s.response);
  }

 private:
  struct State {
    grpc::ClientContext context;
    Request request;
    Response response;
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    grpc::Status status ABSL_GUARDED_BY(mu);
  };

  std::shared_ptr<State> state_;
  const absl::Time deadline_;
  bool started_ = false;
};

}  // namespace tandem
