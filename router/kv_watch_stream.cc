#include "router/kv_watch_stream.h"

#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/time.h>

#include <utility>

#include "serving/request_id.h"

namespace tandem {

class KvWatchStream::Reactor final : public grpc::ClientReadReactor<v1::KvProgress> {
 public:
  Reactor(std::shared_ptr<Shared> shared, const std::shared_ptr<grpc::Channel>& channel)
      : shared_(std::move(shared)), stub_(v1::PrefillService::NewStub(channel)) {}

  void Begin() {
    stub_->async()->WatchKv(&shared_->context, &shared_->request, this);
    StartRead(&incoming_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream is over; OnDone follows
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->messages.push_back(std::move(incoming_));
    }
    incoming_.Clear();
    StartRead(&incoming_);
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
  std::unique_ptr<v1::PrefillService::Stub> stub_;
  v1::KvProgress incoming_;
};

KvWatchStream::KvWatchStream(const std::shared_ptr<grpc::Channel>& channel,
                             v1::WatchKvRequest request, absl::Time deadline,
                             const std::string& request_id)
    : shared_(std::make_shared<Shared>()) {
  shared_->request = std::move(request);
  shared_->context.set_deadline(absl::ToChronoTime(deadline));
  SetRequestIdMetadata(&shared_->context, request_id);
  (new Reactor(shared_, channel))->Begin();
}

KvWatchStream::~KvWatchStream() { shared_->context.TryCancel(); }

grpc::ClientContext* KvWatchStream::context() { return &shared_->context; }

KvWatchStream::ReadResult KvWatchStream::Read(absl::Duration wait) {
  Shared& s = *shared_;
  ReadResult next;
  absl::MutexLock lock(&s.mu);
  const auto ready = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    return !s.messages.empty() || s.done;
  };
  if (!s.mu.AwaitWithTimeout(absl::Condition(&ready), wait)) return next;
  if (!s.messages.empty()) {
    next.kind = ReadResult::Kind::kMessage;
    next.message = std::move(s.messages.front());
    s.messages.pop_front();
    return next;
  }
  next.kind = ReadResult::Kind::kEnd;
  next.status = s.status;
  return next;
}

}  // namespace tandem
