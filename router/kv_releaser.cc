#include "router/kv_releaser.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "router/unary_call.h"
#include "serving/request_id.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {

struct KvReleaser::Call {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::PrefillService::Stub> stub;
  std::string node;
  std::string request_id;
  grpc::ClientContext context;
  v1::ReleaseKvRequest request;
  v1::ReleaseKvResponse response;
};

KvReleaser::KvReleaser(absl::Duration timeout, LogFn log)
    : timeout_(timeout), shared_(std::make_shared<Shared>()) {
  shared_->log = std::move(log);
}

KvReleaser::~KvReleaser() {
  // Let the releases in flight land (each is bounded by its deadline); cancel any that did not.
  if (!WaitIdle(absl::Now() + timeout_)) {
    {
      absl::MutexLock lock(&shared_->mu);
      for (const std::shared_ptr<Call>& call : shared_->running) call->context.TryCancel();
    }
    WaitIdle(absl::Now() + kCallCompletionGrace);
  }
  FreeCompleted();
}

void KvReleaser::ReleaseRequest(std::shared_ptr<grpc::Channel> channel, const std::string& node,
                                const std::string& node_request_id, const std::string& request_id) {
  FreeCompleted();
  // Held until the call has been started: its completion (and a FreeCompleted on another thread)
  // may come before the start returns.
  const std::shared_ptr<Call> owned = std::make_shared<Call>();
  Call* call = owned.get();
  call->stub = v1::PrefillService::NewStub(channel);
  call->channel = std::move(channel);
  call->node = node;
  call->request_id = request_id;
  call->request.set_request_id(node_request_id);
  call->request.set_epoch(0);
  call->request.set_generation(0);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  SetRequestIdMetadata(&call->context, request_id);
  {
    absl::MutexLock lock(&shared_->mu);
    ++shared_->in_flight;
    shared_->running.push_back(owned);
  }
  call->stub->async()->ReleaseKv(
      &call->context, &call->request, &call->response,
      [shared = shared_, call](grpc::Status status) {
        if (!status.ok()) {
          shared->log(absl::StrCat("request ", call->request_id,
                                   ": ReleaseKv by request id on prefill node ", call->node,
                                   " after its Prefill call was abandoned failed (the lease, if "
                                   "any, will expire): ",
                                   status.error_message()));
        }
        Completed(shared, call);
      });
}

void KvReleaser::Completed(const std::shared_ptr<Shared>& shared, Call* call) {
  absl::MutexLock lock(&shared->mu);
  auto it = std::find_if(shared->running.begin(), shared->running.end(),
                         [call](const std::shared_ptr<Call>& c) { return c.get() == call; });
  shared->completed.push_back(std::move(*it));
  shared->running.erase(it);
  --shared->in_flight;
}

void KvReleaser::FreeCompleted() {
  std::vector<std::shared_ptr<Call>> done;
  absl::MutexLock lock(&shared_->mu);
  done.swap(shared_->completed);
  // `done` is destroyed after the lock is released (declared before it).
}

int KvReleaser::in_flight() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->in_flight;
}

bool KvReleaser::WaitIdle(absl::Time deadline) const {
  Shared& s = *shared_;
  absl::MutexLock lock(&s.mu);
  return s.mu.AwaitWithDeadline(
      absl::Condition(
          +[](Shared* sh) ABSL_NO_THREAD_SAFETY_ANALYSIS { return sh->in_flight == 0; }, &s),
      deadline);
}

}  // namespace tandem
