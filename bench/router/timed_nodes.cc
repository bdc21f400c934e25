#include "bench/router/timed_nodes.h"

#include <grpcpp/alarm.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "serving/loopback_server.h"

namespace tandem::bench {
namespace {

v1::InstanceStatus NodeStatus(v1::InstanceRole role, const std::string& model,
                              const std::string& address) {
  v1::InstanceStatus status;
  status.set_engine_id(absl::StrCat("timed-", address));
  status.set_role(role);
  status.set_model(model);
  status.set_address(address);
  status.set_epoch(1);
  // Room for every stream the bench opens: the router never waits for KV capacity.
  status.mutable_load()->set_free_blocks(1 << 24);
  status.mutable_load()->set_total_blocks(1 << 24);
  return status;
}

}  // namespace

void EmitLog::Record(const std::string& node_request_id, int32_t index, absl::Time at) {
  const std::string client_id = node_request_id.substr(0, node_request_id.find('#'));
  absl::MutexLock lock(&mu_);
  std::vector<absl::Time>& times = times_[client_id];
  if (times.size() <= static_cast<size_t>(index)) times.resize(index + 1);
  times[index] = at;
}

std::vector<absl::Time> EmitLog::Take(const std::string& client_id) {
  absl::MutexLock lock(&mu_);
  const auto it = times_.find(client_id);
  if (it == times_.end()) return {};
  std::vector<absl::Time> out = std::move(it->second);
  times_.erase(it);
  return out;
}

TimedPrefill::TimedPrefill(std::string model, const std::atomic<int32_t>* token, EmitLog* log)
    : model_(std::move(model)), token_(token), log_(log) {
  server_ = StartLoopbackServer(this, &address_);
}

TimedPrefill::~TimedPrefill() { StopLoopbackServer(server_.get(), absl::Seconds(2)); }

grpc::ServerUnaryReactor* TimedPrefill::Prefill(grpc::CallbackServerContext* ctx,
                                                const v1::PrefillRequest* request,
                                                v1::PrefillResponse* response) {
  response->set_first_token(token_->load());
  v1::KvHandle* kv = response->mutable_kv();
  kv->set_engine_id(absl::StrCat("timed-", address_));
  kv->set_epoch(1);
  kv->set_request_id(request->request_id());
  kv->set_num_tokens(request->prompt_ids_size());
  kv->set_generation(1);
  kv->add_block_table(0);
  kv->set_prefill_address(address_);
  log_->Record(request->request_id(), 0, absl::Now());
  return FinishUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TimedPrefill::ReleaseKv(grpc::CallbackServerContext* ctx,
                                                  const v1::ReleaseKvRequest*,
                                                  v1::ReleaseKvResponse* response) {
  response->set_lease_held(true);
  return FinishUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TimedPrefill::Status(grpc::CallbackServerContext* ctx,
                                               const v1::StatusRequest*,
                                               v1::InstanceStatus* response) {
  *response = NodeStatus(v1::INSTANCE_ROLE_PREFILL, model_, address_);
  return FinishUnary(ctx, grpc::Status::OK);
}

// One Decode call: an alarm per token, a write per alarm, then the finish event.
class TimedDecode::Stream final : public grpc::ServerWriteReactor<v1::DecodeEvent> {
 public:
  Stream(const TimedDecode* owner, const v1::DecodeRequest& request)
      : owner_(owner),
        request_id_(request.request_id()),
        to_emit_(request.max_new_tokens() - 1),
        next_at_(absl::Now()) {
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    Next();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    alarm_.Cancel();  // a pending alarm fires with false and ends the stream
  }
  void OnDone() override { delete this; }

 private:
  // Waits for the next emission time, then writes the token (or ends the stream).
  void Next() {
    if (written_ > to_emit_) {  // the finish event was written
      Finish(grpc::Status::OK);
      return;
    }
    if (written_ == to_emit_) {
      event_.Clear();
      event_.mutable_finish()->set_reason(v1::FINISH_REASON_LENGTH);
      event_.mutable_finish()->set_generated(to_emit_ + 1);
      ++written_;
      StartWrite(&event_);
      return;
    }
    next_at_ += owner_->period_;
    {
      absl::MutexLock lock(&mu_);
      if (!cancelled_) {
        alarm_.Set(absl::ToChronoTime(next_at_), [this](bool fired) { Emit(fired); });
        return;
      }
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  // The alarm of the next token went off (`fired`) or was cancelled.
  void Emit(bool fired) {
    if (!fired) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      return;
    }
    event_.Clear();
    event_.set_token(owner_->token_->load());
    ++written_;
    owner_->log_->Record(request_id_, written_, absl::Now());
    StartWrite(&event_);
  }

  const TimedDecode* const owner_;
  const std::string request_id_;
  const int32_t to_emit_;
  absl::Time next_at_;
  int32_t written_ = 0;
  v1::DecodeEvent event_;
  absl::Mutex mu_;  // Set and Cancel of the alarm come from different threads
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Alarm alarm_ ABSL_GUARDED_BY(mu_);
};

TimedDecode::TimedDecode(std::string model, const std::atomic<int32_t>* token,
                         absl::Duration period, EmitLog* log)
    : model_(std::move(model)), token_(token), period_(period), log_(log) {
  server_ = StartLoopbackServer(this, &address_);
}

TimedDecode::~TimedDecode() { StopLoopbackServer(server_.get(), absl::Seconds(2)); }

grpc::ServerWriteReactor<v1::DecodeEvent>* TimedDecode::Decode(grpc::CallbackServerContext*,
                                                               const v1::DecodeRequest* request) {
  return new Stream(this, *request);
}

grpc::ServerUnaryReactor* TimedDecode::Status(grpc::CallbackServerContext* ctx,
                                              const v1::StatusRequest*,
                                              v1::InstanceStatus* response) {
  *response = NodeStatus(v1::INSTANCE_ROLE_DECODE, model_, address_);
  return FinishUnary(ctx, grpc::Status::OK);
}

}  // namespace tandem::bench
