// One server-streaming gRPC call read through the callback API as a NodeStream (node_client.h):
// the one reader behind both DecodeService.Decode and PrefillService.WatchKv. Messages are
// queued as they arrive; Read() returns them in order, then the end with its status (converted
// once, by FromGrpcStatus). The reactor frees itself when gRPC is done with the call; the
// context, request, queue and the stub the call was started on live in a block shared with it,
// so destroying the stream early (which cancels the call) is safe.
//
// Thread-safety: Read from one thread; Cancel() from any thread.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/status.h>
#include <grpcpp/support/time.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
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
  ~GrpcReadStream() override { shared_->context.TryCancel(); }
  GrpcReadStream(const GrpcReadStream&) = delete;
  GrpcReadStream& operator=(const GrpcReadStream&) = delete;

  void Cancel() override { shared_->context.TryCancel(); }

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

 private:
  struct Shared {
    grpc::ClientContext context;
    Request request;
    absl::Mutex mu;
    std::deque<Message> messages ABSL_GUARDED_BY(mu);
    bool done ABSL_GUARDED_BY(mu) = false;
    grpc::Status status ABSL_GUARDED_BY(mu);
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
      {
        absl::MutexLock lock(&shared_->mu);
        shared_->messages.push_back(std::move(incoming_));
      }
      incoming_.Clear();
      this->StartRead(&incoming_);
    }

    void OnDone(const grpc::Status& status) override {
      {
        absl::MutexLock lock(&shared_->mu);
        shared_->status = status;
        shared_->done = true;
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
