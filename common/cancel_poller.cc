#include "common/cancel_poller.h"

#include <utility>

namespace tandem {

CancelPoller::CancelPoller(absl::Duration interval)
    : interval_(interval), thread_([this] { Loop(); }) {}

CancelPoller::~CancelPoller() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

CancelPoller::Registration::Registration(Registration&& other) noexcept
    : poller_(std::exchange(other.poller_, nullptr)), id_(other.id_) {}

CancelPoller::Registration::~Registration() {
  if (poller_ != nullptr) poller_->Remove(id_);
}

CancelPoller::Registration CancelPoller::Add(absl::AnyInvocable<bool()> probe,
                                             CancellationToken* token) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{std::move(probe), token});
  return Registration(this, id);
}

void CancelPoller::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  entries_.erase(id);
}

int32_t CancelPoller::registered() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(entries_.size());
}

void CancelPoller::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    // Asleep while nothing is registered; else one round per interval.
    auto work = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !entries_.empty(); };
    mu_.Await(absl::Condition(&work));
    if (stopping_) return;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.probe()) {
        it->second.token->Cancel();
        it = entries_.erase(it);  // the registration's destructor finds nothing to remove
      } else {
        ++it;
      }
    }
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_);
    if (stopping_) return;
  }
}

}  // namespace tandem
