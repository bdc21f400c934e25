#include "router/fake/fake_node_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

template <typename Message>
class ScriptedStream final : public NodeStream<Message> {
 public:
  using Result = typename NodeStream<Message>::ReadResult;

  ScriptedStream(FakeClock* clock, StreamScript<Message> script, absl::Time deadline,
                 std::shared_ptr<bool> cancelled, std::shared_ptr<int> relayed)
      : clock_(clock),
        script_(std::move(script)),
        opened_(clock->Now()),
        deadline_(deadline),
        cancelled_(std::move(cancelled)),
        relayed_(std::move(relayed)) {}

  Result Relay(absl::FunctionRef<bool(Message&)> on_message, absl::Duration idle) override {
    return NodeStream<Message>::Relay(
        [&](Message& message) {
          {
            absl::MutexLock lock(&mu_);
            ++*relayed_;
          }
          return on_message(message);
        },
        idle);
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    *cancelled_ = true;
    End(absl::CancelledError("call cancelled by the router"));
    if (arrivals_ != nullptr) arrivals_->Note();
  }

  // Each later step's time (and the deadline) becomes a clock alarm: a Wait stops there, as a
  // real arrival would wake it.
  void NoteArrivalsIn(Arrivals* arrivals) override {
    absl::MutexLock lock(&mu_);
    arrivals_ = arrivals;
    if (arrivals == nullptr || ended_) return;
    for (size_t i = next_; i < script_.size(); ++i) {
      clock_->AddAlarm(std::min(opened_ + script_[i].after, deadline_));
    }
    clock_->AddAlarm(deadline_);
  }

  Result Read(absl::Duration wait) override {
    absl::MutexLock lock(&mu_);
    Result result;
    if (ended_) {
      result.kind = Result::Kind::kEnd;
      result.status = end_status_;
      return result;
    }
    const absl::Time now = clock_->Now();
    const absl::Time ready = next_ < script_.size() ? opened_ + script_[next_].after : now;
    if (std::min(ready, deadline_) > now + wait) {
      clock_->Advance(wait);
      return result;  // idle
    }
    if (deadline_ < ready) {
      clock_->AdvanceTo(deadline_);
      End(absl::DeadlineExceededError("Deadline Exceeded"));
    } else if (next_ >= script_.size()) {
      End(absl::OkStatus());
    } else {
      clock_->AdvanceTo(ready);
      StreamStep<Message>& step = script_[next_++];
      if (step.message.has_value()) {
        result.kind = Result::Kind::kMessage;
        result.message = std::move(*step.message);
        return result;
      }
      End(step.status);
    }
    result.kind = Result::Kind::kEnd;
    result.status = end_status_;
    return result;
  }

 private:
  void End(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ended_ = true;
    end_status_ = std::move(status);
  }

  FakeClock* const clock_;
  absl::Mutex mu_;
  StreamScript<Message> script_ ABSL_GUARDED_BY(mu_);
  const absl::Time opened_;
  const absl::Time deadline_;
  std::shared_ptr<bool> cancelled_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<int> relayed_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  Arrivals* arrivals_ ABSL_GUARDED_BY(mu_) = nullptr;
};

template <typename Request>
RecordedCall<Request> Record(const NodeRef& node, Request request, absl::Time at,
                             absl::Time deadline, const std::string& request_id) {
  RecordedCall<Request> call;
  call.address = node.address;
  call.request = std::move(request);
  call.at = at;
  call.deadline = deadline;
  call.request_id = request_id;
  return call;
}

}  // namespace

absl::StatusOr<v1::PrefillResponse> FakeNodeClient::Prefill(const NodeRef& node,
                                                            v1::PrefillRequest request,
                                                            absl::Time deadline,
                                                            const std::string& request_id,
                                                            const CancellationToken* cancel) {
  {
    absl::MutexLock lock(&mu_);
    prefills_.push_back(Record(node, request, clock_->Now(), deadline, request_id));
  }
  if (cancel != nullptr && cancel->cancelled()) {
    return absl::CancelledError("call cancelled by the router");
  }
  if (!on_prefill) return absl::UnimplementedError("FakeNodeClient: no on_prefill");
  absl::StatusOr<v1::PrefillResponse> response = on_prefill(node.address, request);
  if (clock_->Now() > deadline) return absl::DeadlineExceededError("Deadline Exceeded");
  return response;
}

absl::Status FakeNodeClient::ReleaseKv(const NodeRef& node, v1::ReleaseKvRequest request,
                                       absl::Time deadline, const std::string& request_id) {
  {
    absl::MutexLock lock(&mu_);
    releases_.push_back(Record(node, request, clock_->Now(), deadline, request_id));
  }
  return on_release ? on_release(node.address, request) : absl::OkStatus();
}

std::unique_ptr<DecodeEventStream> FakeNodeClient::Decode(const NodeRef& node,
                                                          v1::DecodeRequest request,
                                                          absl::Time deadline,
                                                          const std::string& request_id) {
  return OpenStream<v1::DecodeEvent>(decodes_, on_decode, "on_decode", node, std::move(request),
                                     deadline, request_id);
}

std::unique_ptr<KvProgressStream> FakeNodeClient::WatchKv(const NodeRef& node,
                                                          v1::WatchKvRequest request,
                                                          absl::Time deadline,
                                                          const std::string& request_id) {
  return OpenStream<v1::KvProgress>(watches_, on_watch, "on_watch", node, std::move(request),
                                    deadline, request_id);
}

template <typename Message, typename Request, typename Handler>
std::unique_ptr<NodeStream<Message>> FakeNodeClient::OpenStream(
    std::vector<RecordedCall<Request>>& calls, const Handler& handler, const char* handler_name,
    const NodeRef& node, Request request, absl::Time deadline, const std::string& request_id) {
  RecordedCall<Request> call = Record(node, request, clock_->Now(), deadline, request_id);
  std::shared_ptr<bool> cancelled = call.cancelled;
  std::shared_ptr<int> relayed = call.relayed;
  {
    absl::MutexLock lock(&mu_);
    calls.push_back(std::move(call));
  }
  StreamScript<Message> script =
      handler ? handler(node.address, request)
              : StreamScript<Message>{EndAt<Message>(
                    absl::ZeroDuration(),
                    absl::UnimplementedError(absl::StrCat("FakeNodeClient: no ", handler_name)))};
  return std::make_unique<ScriptedStream<Message>>(clock_, std::move(script), deadline,
                                                   std::move(cancelled), std::move(relayed));
}

std::vector<RecordedCall<v1::PrefillRequest>> FakeNodeClient::prefills() const {
  absl::MutexLock lock(&mu_);
  return prefills_;
}
std::vector<RecordedCall<v1::ReleaseKvRequest>> FakeNodeClient::releases() const {
  absl::MutexLock lock(&mu_);
  return releases_;
}
std::vector<RecordedCall<v1::DecodeRequest>> FakeNodeClient::decodes() const {
  absl::MutexLock lock(&mu_);
  return decodes_;
}
std::vector<RecordedCall<v1::WatchKvRequest>> FakeNodeClient::watches() const {
  absl::MutexLock lock(&mu_);
  return watches_;
}

StreamStep<v1::DecodeEvent> TokenAt(absl::Duration after, int32_t token) {
  v1::DecodeEvent event;
  event.set_token(token);
  return StreamStep<v1::DecodeEvent>{after, std::move(event), absl::OkStatus()};
}

StreamStep<v1::DecodeEvent> FinishAt(absl::Duration after, v1::FinishReason reason) {
  v1::DecodeEvent event;
  event.mutable_finish()->set_reason(reason);
  return StreamStep<v1::DecodeEvent>{after, std::move(event), absl::OkStatus()};
}

}  // namespace tandem
