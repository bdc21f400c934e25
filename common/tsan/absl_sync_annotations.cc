// ThreadSanitizer builds only (TANDEM_TSAN): teach TSan abseil's synchronisation.
//
// Debian's libabsl is built without -fsanitize=thread, so absl::Mutex, absl::CondVar and
// absl::Notification (futex-based, not pthread) create no happens-before edges TSan can see, and
// every variable they guard would be reported as a race. This file defines those entry points in
// the executable (exported with -rdynamic, so they interpose the shared library's, including its
// internal calls), forwards each to the library's own definition (dlsym RTLD_NEXT) and adds the
// edges: release on the mutex before it is given up (Unlock, and Await / CondVar wait, which
// release it while waiting), acquire after it is held again; release on Notify, acquire after a
// wait for the notification. Nothing else changes: the library still does the locking. Limit:
// a race inside a Condition's function is not reported (see Quiet).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();

namespace {

template <typename Fn>
Fn Real(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan absl annotations: %s not found in libabsl (%s)\n", mangled,
                 dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

void* Addr(const void* p) { return const_cast<void*>(p); }

// Inside the library's calls the only instrumented code that runs is a Condition's function,
// evaluated under the mutex by whichever thread absl picks (often the one unlocking, after its
// release annotation). Those reads are protected by the mutex but TSan cannot order them, so the
// thread's memory accesses are ignored for the length of the call; the edges stay.
template <typename F>
auto Quiet(F&& f) {
  struct Ignore {
    Ignore() { __tsan_ignore_thread_begin(); }
    ~Ignore() { __tsan_ignore_thread_end(); }
  } ignore;
  return f();
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

#define TANDEM_REAL(type, name) static const auto real = Real<type>(name)

void Mutex::Lock() {
  TANDEM_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  Quiet([&] { return real(this); });
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  TANDEM_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  Quiet([&] { return real(this); });
}

void Mutex::ReaderLock() {
  TANDEM_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  Quiet([&] { return real(this); });
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  TANDEM_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  __tsan_release(this);
  Quiet([&] { return real(this); });
}

bool Mutex::TryLock() {
  TANDEM_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  const bool held = Quiet([&] { return real(this); });
  if (held) __tsan_acquire(this);
  return held;
}

bool Mutex::ReaderTryLock() {
  TANDEM_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool held = Quiet([&] { return real(this); });
  if (held) __tsan_acquire(this);
  return held;
}

void Mutex::LockWhen(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  Quiet([&] { return real(this, cond); });
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Quiet([&] { return real(this, cond); });
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool r = Quiet([&] { return real(this, cond, timeout); });
  __tsan_acquire(this);  // held on return either way
  return r;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Time),
              "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool r = Quiet([&] { return real(this, cond, deadline); });
  __tsan_acquire(this);
  return r;
}

void Mutex::Await(const Condition& cond) {
  TANDEM_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);  // the mutex may be given up while waiting
  Quiet([&] { return real(this, cond); });
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool r = Quiet([&] { return real(this, cond, timeout); });
  __tsan_acquire(this);
  return r;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  TANDEM_REAL(bool (*)(Mutex*, const Condition&, Time),
              "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool r = Quiet([&] { return real(this, cond, deadline); });
  __tsan_acquire(this);
  return r;
}

void CondVar::Wait(Mutex* mu) {
  TANDEM_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  Quiet([&] { return real(this, mu); });
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  TANDEM_REAL(bool (*)(CondVar*, Mutex*, Duration),
              "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool r = Quiet([&] { return real(this, mu, timeout); });
  __tsan_acquire(mu);
  return r;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  TANDEM_REAL(bool (*)(CondVar*, Mutex*, Time),
              "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool r = Quiet([&] { return real(this, mu, deadline); });
  __tsan_acquire(mu);
  return r;
}

void Notification::Notify() {
  TANDEM_REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  __tsan_release(this);
  Quiet([&] { return real(this); });
}

void Notification::WaitForNotification() const {
  TANDEM_REAL(void (*)(const Notification*),
              "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  Quiet([&] { return real(this); });
  __tsan_acquire(Addr(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  TANDEM_REAL(bool (*)(const Notification*, Duration),
              "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool r = Quiet([&] { return real(this, timeout); });
  if (r) __tsan_acquire(Addr(this));
  return r;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  TANDEM_REAL(bool (*)(const Notification*, Time),
              "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool r = Quiet([&] { return real(this, deadline); });
  if (r) __tsan_acquire(Addr(this));
  return r;
}

#undef TANDEM_REAL

ABSL_NAMESPACE_END
}  // namespace absl
