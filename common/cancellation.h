// CancellationToken: the one way a request's "stop" travels (docs/design.md#cancellation).
//
// An owner calls Cancel(); everyone else holds a `const CancellationToken&` and either reads
// cancelled() (a lock-free load, cheap enough for a hot loop), blocks in WaitFor / WaitUntil
// (woken at once by Cancel, never by a poll interval), or registers a callback with OnCancel to
// wake something that is blocked elsewhere (a gRPC call's TryCancel, a condition another mutex
// guards). A child token (constructed with a parent) is cancelled when its parent is, and can be
// cancelled on its own without touching the parent: a decode pull's token is a child of the
// client's, so a lost lease or a failed rank stops the pull without cancelling the request.
//
// Callbacks run once, on the thread that calls Cancel (in registration order, outside the
// token's lock), or at once on the registering thread when the token is already cancelled.
// Destroying a CancelCallback unregisters it; when its callback is running on another thread at
// that moment, the destructor waits for it to return, so a callback may use whatever its handle's
// owner owns. Callbacks must be short and must not block (they run on the canceller's thread);
// they may cancel other tokens and may destroy their own handle.
//
// Ownership: a token is neither copied nor moved. REQUIRES: a token outlives the CancelCallbacks
// registered on it, and a parent outlives its children.
// Thread-safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem {

class CancellationToken;

// RAII registration of a callback (CancellationToken::OnCancel). Empty when default-constructed,
// moved from, or returned for a token that was already cancelled (the callback has run).
class CancelCallback {
 public:
  CancelCallback() = default;
  CancelCallback(CancelCallback&& other) noexcept;
  CancelCallback& operator=(CancelCallback&& other) noexcept;
  CancelCallback(const CancelCallback&) = delete;
  CancelCallback& operator=(const CancelCallback&) = delete;
  ~CancelCallback() { Reset(); }

  // Unregisters now (waiting for the callback if it is running on another thread).
  void Reset();

 private:
  friend class CancellationToken;
  CancelCallback(const CancellationToken* token, uint64_t id) : token_(token), id_(id) {}

  const CancellationToken* token_ = nullptr;
  uint64_t id_ = 0;
};

class CancellationToken {
 public:
  CancellationToken() = default;
  // A child: cancelled when `parent` is (at once, when it already is). REQUIRES: parent
  // outlives this token.
  explicit CancellationToken(const CancellationToken* parent);
  ~CancellationToken() = default;
  CancellationToken(const CancellationToken&) = delete;
  CancellationToken& operator=(const CancellationToken&) = delete;

  // Idempotent. The first call runs the registered callbacks before it returns.
  void Cancel();
  bool cancelled() const { return flag_.load(std::memory_order_acquire); }

  // Whether the token was cancelled before the timeout / deadline passed.
  bool WaitFor(absl::Duration timeout) const { return WaitUntil(absl::Now() + timeout); }
  bool WaitUntil(absl::Time deadline) const;

  // Runs `fn` once when the token is cancelled, for as long as the returned handle lives.
  [[nodiscard]] CancelCallback OnCancel(absl::AnyInvocable<void() &&> fn) const;

 private:
  friend class CancelCallback;
  struct Entry {
    uint64_t id;
    absl::AnyInvocable<void() &&> fn;
  };
  void Unregister(uint64_t id) const;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> flag_{false};  // cancelled_, readable without the lock
  mutable uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  mutable std::vector<Entry> callbacks_ ABSL_GUARDED_BY(mu_);
  // The callback Cancel is running outside the lock (0: none), and on which thread.
  uint64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread::id running_thread_ ABSL_GUARDED_BY(mu_);
  CancelCallback parent_link_;  // last: unregistered before anything above is destroyed
};

}  // namespace tandem
