// Arrivals: an event counter that several streams bump, so one thread can wait for whichever of
// them has something next instead of polling each in turn (the pipelined Decode call's wait for
// its first event, woken by the decode stream or the prefill's WatchKv: decode_call.h).
//
// A waiter reads count() first, then looks at every stream (non-blocking reads), and only then
// waits in AwaitAfter(seen, ...): an arrival between the look and the wait has already moved the
// count, so it is never missed. A stream given NoteArrivalsIn (node_client.h) calls Note() on its
// transport's thread as each message or its end arrives.
//
// Thread-safety: all methods are thread-safe. Note() never blocks beyond the counter's lock.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem {

class Arrivals {
 public:
  Arrivals() = default;
  Arrivals(const Arrivals&) = delete;
  Arrivals& operator=(const Arrivals&) = delete;

  void Note() {
    absl::MutexLock lock(&mu_);
    ++count_;
  }
  uint64_t count() const {
    absl::MutexLock lock(&mu_);
    return count_;
  }
  // Blocks until the count differs from `seen` or `deadline` passes; true for the former.
  bool AwaitAfter(uint64_t seen, absl::Time deadline) const {
    absl::MutexLock lock(&mu_);
    const auto moved = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ != seen; };
    return mu_.AwaitWithDeadline(absl::Condition(&moved), deadline);
  }

 private:
  mutable absl::Mutex mu_;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem
