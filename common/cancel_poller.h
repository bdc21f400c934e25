// CancelPoller: turns a cancellation that can only be asked about into a CancellationToken
// (common/cancellation.h, docs/design.md#cancellation).
//
// gRPC's synchronous server API reports a client's cancel only through
// ServerContext::IsCancelled() — no callback, nothing to wait on — so a service keeps one poller:
// a handler registers its call (Add(probe, token)) and one thread asks every registered probe
// each `interval`, cancelling the token of the first that says yes. Everything downstream waits
// on the token, so this is the one poll on a node's call path and its interval the floor of the
// cancel latency from a client to a node. The thread sleeps while nothing is registered.
//
// Probes and the cancels they trigger (with the token's callbacks) run on the poller's thread
// under its lock, so once a Registration is destroyed its probe and token are not touched again;
// they must not call back into the poller. Ownership: the poller outlives its registrations; the
// destructor joins the thread. Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"

namespace tandem {

class CancelPoller {
 public:
  explicit CancelPoller(absl::Duration interval = absl::Milliseconds(5));
  ~CancelPoller();
  CancelPoller(const CancelPoller&) = delete;
  CancelPoller& operator=(const CancelPoller&) = delete;

  // While alive, `probe` is asked each interval; once it says yes, `token` is cancelled (and the
  // probe no longer asked).
  class Registration {
   public:
    Registration(Registration&& other) noexcept;
    Registration& operator=(Registration&&) = delete;
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;
    ~Registration();

   private:
    friend class CancelPoller;
    Registration(CancelPoller* poller, uint64_t id) : poller_(poller), id_(id) {}
    CancelPoller* poller_;
    uint64_t id_;
  };

  // REQUIRES: token outlives the registration.
  [[nodiscard]] Registration Add(absl::AnyInvocable<bool()> probe, CancellationToken* token);

  int32_t registered() const;

 private:
  struct Entry {
    absl::AnyInvocable<bool()> probe;
    CancellationToken* token;
  };
  void Loop();
  void Remove(uint64_t id);

  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after every member above is initialised
};

}  // namespace tandem
