// The threads that run calls which block, one per call for the call's life: a node service's
// Decode, Prefill and WatchKv (gRPC's callback API hands a call to one of gRPC's few callback
// threads, which must not block, so a call that waits for KV capacity, a pull, the model or the
// next chunk runs on a thread of its own; the reactors of serving/queued_write_reactor.h and
// serving/unary_reactors.h carry its writes and its cancel) and the router's Generate requests
// (router/generate_reactor.h).
//
// Bounded: at most `max_threads` run at once; past that TrySpawn refuses and the service answers
// RESOURCE_EXHAUSTED, as a synchronous gRPC server does when its thread quota is spent. Each thread
// moves itself to a "finished" list as its last act; finished threads are joined by the next
// TrySpawn, by JoinAll or by the destructor, so no thread is ever detached.
//
// Ownership: the destructor waits for every thread (each call bounds its own waits, and a server
// that shuts down cancels its calls, so this ends); destroy it after the gRPC server has shut
// down. Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem {

// The default bound of a node service's call threads. Decode and Prefill calls are admitted
// through the DrainGate first (serving/drain_gate.h: --max_queued_requests waiting, plus what the
// engine runs), which keeps them well below it; it bounds the rest (WatchKv streams, and every
// call when --max_queued_requests=0).
inline constexpr int64_t kDefaultMaxCallThreads = 4096;

class CallThreads {
 public:
  // REQUIRES: max_threads >= 1.
  explicit CallThreads(int64_t max_threads = kDefaultMaxCallThreads);
  ~CallThreads();
  CallThreads(const CallThreads&) = delete;
  CallThreads& operator=(const CallThreads&) = delete;

  // Runs `body` on a new thread, or returns false (and destroys `body` unrun) when max_threads
  // run already.
  [[nodiscard]] bool TrySpawn(absl::AnyInvocable<void() &&> body);
  // Threads running a body now.
  int64_t running() const;
  // Waits until no thread runs its body or `deadline` passes (woken by each thread's end, not
  // polled); true when none runs. Joins nothing.
  bool AwaitIdle(absl::Time deadline) const;
  // Waits for every thread and joins it.
  void JoinAll();
  int64_t max_threads() const { return max_threads_; }

 private:
  void Finished(uint64_t id);
  void JoinFinished();

  const int64_t max_threads_;
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, std::thread> running_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
