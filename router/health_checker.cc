#include "router/health_checker.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "router/retry_policy.h"
#include "router/unary_call.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {

HealthChecker::HealthChecker(NodePool* pool, absl::Duration interval, absl::Duration poll_timeout,
                             absl::Duration recovery_interval)
    : pool_(pool),
      interval_(interval),
      poll_timeout_(poll_timeout),
      recovery_interval_(recovery_interval) {
  thread_ = std::thread([this] { Loop(); });
}

HealthChecker::~HealthChecker() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void HealthChecker::PollNow() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void HealthChecker::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      wake_ = false;
    }
    PollOnce();
    const absl::Duration delay =
        HealthPollDelay(interval_, recovery_interval_, pool_->AllHealthy());
    absl::MutexLock lock(&mu_);
    const auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || wake_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), delay);
  }
}

void HealthChecker::PollOnce() {
  pool_->Expire(absl::Now());
  using StatusCall = UnaryCall<v1::StatusRequest, v1::InstanceStatus>;
  struct Poll {
    NodePool::PollTarget target;
    std::unique_ptr<StatusCall> call;
  };
  std::vector<Poll> polls;
  const absl::Time started = absl::Now();
  const absl::Time deadline = started + poll_timeout_;
  for (NodePool::PollTarget& target : pool_->PollTargets()) {
    auto call = std::make_unique<StatusCall>(v1::StatusRequest(), deadline);
    if (target.role == v1::INSTANCE_ROLE_PREFILL) {
      auto stub = std::make_shared<v1::PrefillService::Stub>(target.channel);
      call->Start([stub](auto* ctx, auto* req, auto* resp, auto done) {
        stub->async()->Status(ctx, req, resp, std::move(done));
      });
    } else {
      auto stub = std::make_shared<v1::DecodeService::Stub>(target.channel);
      call->Start([stub](auto* ctx, auto* req, auto* resp, auto done) {
        stub->async()->Status(ctx, req, resp, std::move(done));
      });
    }
    polls.push_back({std::move(target), std::move(call)});
  }
  for (Poll& poll : polls) {
    const absl::StatusOr<v1::InstanceStatus> status = poll.call->Wait();
    if (status.ok()) {
      pool_->ReportStatus(poll.target.address, poll.target.role, *status, started, absl::Now());
    } else {
      pool_->ReportFailure(poll.target.address, poll.target.role, status.status());
    }
  }
}

}  // namespace tandem
