#include "common/cancellation.h"

#include <algorithm>
#include <utility>

namespace tandem {

CancelCallback::CancelCallback(CancelCallback&& other) noexcept
    : token_(std::exchange(other.token_, nullptr)), id_(std::exchange(other.id_, 0)) {}

CancelCallback& CancelCallback::operator=(CancelCallback&& other) noexcept {
  if (this != &other) {
    Reset();
    token_ = std::exchange(other.token_, nullptr);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void CancelCallback::Reset() {
  if (token_ != nullptr) token_->Unregister(id_);
  token_ = nullptr;
  id_ = 0;
}

CancellationToken::CancellationToken(const CancellationToken* parent) {
  // In the body: every member is initialised when the parent (already cancelled) calls Cancel.
  parent_link_ = parent->OnCancel([this] { Cancel(); });
}

void CancellationToken::Cancel() {
  mu_.Lock();
  if (cancelled_) {
    mu_.Unlock();
    return;
  }
  cancelled_ = true;
  flag_.store(true, std::memory_order_release);
  running_thread_ = std::this_thread::get_id();
  // One at a time, outside the lock, so a callback may cancel other tokens or drop its handle;
  // a handle destroyed meanwhile on another thread waits on running_ (Unregister).
  while (!callbacks_.empty()) {
    absl::AnyInvocable<void()&&> fn = std::move(callbacks_.front().fn);
    running_ = callbacks_.front().id;
    callbacks_.erase(callbacks_.begin());
    mu_.Unlock();
    std::move(fn)();
    fn = nullptr;  // whatever it captured goes before its handle may return
    mu_.Lock();
    running_ = 0;
  }
  mu_.Unlock();
}

bool CancellationToken::WaitUntil(absl::Time deadline) const {
  if (cancelled()) return true;
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&cancelled_), deadline);
  return cancelled_;
}

CancelCallback CancellationToken::OnCancel(absl::AnyInvocable<void() &&> fn) const {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      const uint64_t id = next_id_++;
      callbacks_.push_back(Entry{id, std::move(fn)});
      return CancelCallback(this, id);
    }
  }
  std::move(fn)();
  return CancelCallback();
}

void CancellationToken::Unregister(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(callbacks_.begin(), callbacks_.end(),
                         [id](const Entry& e) { return e.id == id; });
  if (it != callbacks_.end()) {
    callbacks_.erase(it);
    return;
  }
  // Running now: wait for it unless it is this thread's own callback dropping its handle. The
  // wait is as long as the callback, which must not block.
  if (running_ == id && running_thread_ != std::this_thread::get_id()) {
    auto done = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ != id; };
    mu_.Await(absl::Condition(&done));
  }
}

}  // namespace tandem
