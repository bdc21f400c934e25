#include "router/decode_stream.h"

#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/time.h>

#include <utility>

#include "serving/request_id.h"

namespace tandem {

class DecodeStream::Reactor final : public grpc::ClientReadReactor<v1::DecodeEvent> {
 public:
  Reactor(std::shared_ptr<Shared> shared, const std::shared_ptr<grpc::Channel>& channel)
      : shared_(std::move(shared)), stub_(v1::DecodeService::NewStub(channel)) {}

  void Begin() {
    stub_->async()->Decode(&shared_->context, &shared_->request, this);
    StartRead(&incoming_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream is over; OnDone follows
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->events.push_back(std::move(incoming_));
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
  std::unique_ptr<v1::DecodeService::Stub> stub_;
  v1::DecodeEvent incoming_;
};

DecodeStream::DecodeStream(const std::shared_ptr<grpc::Channel>& channel, v1::DecodeRequest request,
                           absl::Time deadline, const std::string& request_id)
    : shared_(std::make_shared<Shared>()) {
  shared_->request = std::move(request);
  shared_->context.set_deadline(absl::ToChronoTime(deadline));
  SetRequestIdMetadata(&shared_->context, request_id);
  (new Reactor(shared_, channel))->Begin();
}

DecodeStream::~DecodeStream() { shared_->context.TryCancel(); }

grpc::ClientContext* DecodeStream::context() { return &shared_->context; }

DecodeStream::ReadResult DecodeStream::Read(absl::Duration idle) {
  Shared& s = *shared_;
  ReadResult next;
  absl::MutexLock lock(&s.mu);
  const auto ready = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    return !s.events.empty() || s.done;
  };
  if (!s.mu.AwaitWithTimeout(absl::Condition(&ready), idle)) return next;
  if (!s.events.empty()) {
    next.kind = ReadResult::Kind::kEvent;
    next.event = std::move(s.events.front());
    s.events.pop_front();
    return next;
  }
  next.kind = ReadResult::Kind::kEnd;
  next.status = s.status;
  return next;
}

}  // namespace tandem
