// One server-streaming gRPC call read through the callback API as a NodeStream (node_client.h):
// the one reader behind both DecodeService.Decode and PrefillService.WatchKv. Messages are
// queued as they arrive; Read() returns them in order, then the end with its status (converted
// once, by FromGrpcStatus). While a Relay runs, a message that arrives is handed to its callback
// on gRPC's thread, in the reactor's OnReadDone, instead of being queued (the next read starts
// after the callback returned): a relayed token wakes no other thread. The reactor frees itself
// when gRPC is done with the call; the context, request, queue and the stub the call was
// started on live in a block shared with it, so destroying the stream early (which cancels the
// call) is safe. A queued message and the end also note the reader's Arrivals (NoteArrivalsIn).
//
// Thread-safety: Read and Relay from one thread; Cancel() from any thread.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/status.h>
#include <grpcpp/support/time.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "router/node_client.h"
#include "serving/grpc_status.h"
#include "serving/request_id.h"

namespace tandem {

template <typename Request, typename Message>
class GrpcReadStream final : public NodeStream<Message> {
 public:
  using Result = typename NodeStream<Message>::ReadResult;
  // `start(context, request, reactor)` issues the call (stub->async()->Method(...)); it is kept
  // until the call is done, so it may own the stub.
  using StartFn =
      std::function<void(grpc::ClientContext*, const Request*, grpc::ClientReadReactor<Message>*)>;

  GrpcReadStream(StartFn start, Request request, absl::Time deadline, const std::string& request_id)
      : shared_(std::make_shared<Shared>()) {
    shared_->request = std::move(request);
    shared_->context.set_deadline(absl::ToChronoTime(deadline));
    SetRequestIdMetadata(&shared_->context, request_id);
    (new Reactor(shared_, std::move(start)))->Begin();
  }
  ~GrpcReadStream() override {
    NoteArrivalsIn(nullptr);  // the reactor may outlive this stream, not its reader's counter
    shared_->context.TryCancel();
  }
  GrpcReadStream(const GrpcReadStream&) = delete;
  GrpcReadStream& operator=(const GrpcReadStream&) = delete;

  void Cancel() override { shared_->context.TryCancel(); }

  void NoteArrivalsIn(Arrivals* arrivals) override {
    absl::MutexLock lock(&shared_->mu);
    shared_->arrivals = arrivals;
  }

  Result Read(absl::Duration wait) override {
    Shared& s = *shared_;
    Result next;
    absl::MutexLock lock(&s.mu);
    const auto ready = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
      return !s.messages.empty() || s.done;
    };
    if (!s.mu.AwaitWithTimeout(absl::Condition(&ready), wait)) return next;
    if (!s.messages.empty()) {
      next.kind = Result::Kind::kMessage;
      next.message = std::move(s.messages.front());
      s.messages.pop_front();
      return next;
    }
    next.kind = Result::Kind::kEnd;
    next.status = FromGrpcStatus(s.status);
    return next;
  }

  Result Relay(absl::FunctionRef<bool(Message&)> on_message, absl::Duration idle) override {
    Shared& s = *shared_;
    // What arrived before: handed over here, in order; then the reactor hands over the rest.
    while (true) {
      Message message;
      {
        absl::MutexLock lock(&s.mu);
        if (s.messages.empty()) {
          if (s.done) return Result{Result::Kind::kEnd, {}, FromGrpcStatus(s.status)};
          s.relay.emplace(on_message);
          s.relay_stopped = false;
          s.last_message = absl::Now();
          break;
        }
        message = std::move(s.messages.front());
        s.messages.pop_front();
      }
      if (!on_message(message)) return Result{Result::Kind::kMessage, {}, {}};
    }
    absl::MutexLock lock(&s.mu);
    const auto over = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
      return (s.relay_stopped || s.done) && !s.relaying;
    };
    const auto not_relaying = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return !s.relaying; };
    while (!s.mu.AwaitWithDeadline(absl::Condition(&over), s.last_message + idle)) {
      if (s.relaying) {
        // A message is being handed over as the idle time ran out: it counts.
        s.mu.AwaitWithTimeout(absl::Condition(&not_relaying), idle);
        continue;
      }
      if (absl::Now() >= s.last_message + idle) {
        s.relay.reset();
        return Result{Result::Kind::kIdle, {}, {}};
      }
    }
    s.relay.reset();
    if (s.relay_stopped) return Result{Result::Kind::kMessage, {}, {}};
    // Done: nothing was queued while the relay ran (the queue was empty when it began).
    return Result{Result::Kind::kEnd, {}, FromGrpcStatus(s.status)};
  }

 private:
  struct Shared {
    grpc::ClientContext context;
    Request request;
    absl::Mutex mu;
    std::deque<Message> messages ABSL_GUARDED_BY(mu);
    bool done ABSL_GUARDED_BY(mu) = false;
    grpc::Status status ABSL_GUARDED_BY(mu);
    // The Relay in progress: the reactor hands each message to it while the queue is empty.
    std::optional<absl::FunctionRef<bool(Message&)>> relay ABSL_GUARDED_BY(mu);
    bool relaying ABSL_GUARDED_BY(mu) = false;       // the reactor is in `relay` now
    bool relay_stopped ABSL_GUARDED_BY(mu) = false;  // `relay` returned false
    absl::Time last_message ABSL_GUARDED_BY(mu);     // the relay's latest hand-over (or start)
    // Noted (under mu, so never after NoteArrivalsIn replaced it) as a message is queued or the
    // stream ends.
    Arrivals* arrivals ABSL_GUARDED_BY(mu) = nullptr;
  };

  class Reactor final : public grpc::ClientReadReactor<Message> {
   public:
    Reactor(std::shared_ptr<Shared> shared, StartFn start)
        : shared_(std::move(shared)), start_(std::move(start)) {}

    void Begin() {
      start_(&shared_->context, &shared_->request, this);
      this->StartRead(&incoming_);
      this->StartCall();
    }

    void OnReadDone(bool ok) override {
      if (!ok) return;  // the stream is over; OnDone follows
      Shared& s = *shared_;
      std::optional<absl::FunctionRef<bool(Message&)>> relay;
      {
        absl::MutexLock lock(&s.mu);
        if (s.relay.has_value() && s.messages.empty()) {
          relay.emplace(*s.relay);
          s.relaying = true;
        } else {
          s.messages.push_back(std::move(incoming_));
          if (s.arrivals != nullptr) s.arrivals->Note();
        }
      }
      if (relay.has_value()) {
        // The Relay's caller waits (it returns only once `relaying` is false again).
        const bool more = (*relay)(incoming_);
        absl::MutexLock lock(&s.mu);
        s.relaying = false;
        s.last_message = absl::Now();
        if (!more) {
          s.relay.reset();
          s.relay_stopped = true;
        }
      }
      incoming_.Clear();
      this->StartRead(&incoming_);
    }

    void OnDone(const grpc::Status& status) override {
      {
        absl::MutexLock lock(&shared_->mu);
        shared_->status = status;
        shared_->done = true;
        if (shared_->arrivals != nullptr) shared_->arrivals->Note();
      }
      delete this;
    }

   private:
    std::shared_ptr<Shared> shared_;
    StartFn start_;
    Message incoming_;
  };

  std::shared_ptr<Shared> shared_;
};

}  // namespace tandem
