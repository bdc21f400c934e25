// A thread pool that starts its threads on demand: a task runs on an idle thread when there is
// one, else on a new thread while fewer than `max_threads` exist, else it waits for a thread to
// finish. Threads, once started, stay until Shutdown. So the threads a server holds follow its
// peak concurrency, not its configured maximum: a router allowed 1,024 concurrent HTTP streams
// that serves ten at a time runs about ten threads, and the per-thread memory (stack pages
// touched, the allocator's per-thread caches) stays that of ten. (A pool that starts all its
// threads at once and wakes any idle one per task spreads its work over every thread in turn,
// and each of them ends up holding such memory: docs/RELIABILITY.md, "Router memory".)
//
// Thread-safety: Enqueue from any thread; Shutdown once, not from a pool thread.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem {

class OnDemandPool {
 public:
  // REQUIRES: max_threads >= 1.
  explicit OnDemandPool(size_t max_threads);
  // Shuts down if Shutdown was not called.
  ~OnDemandPool();
  OnDemandPool(const OnDemandPool&) = delete;
  OnDemandPool& operator=(const OnDemandPool&) = delete;

  // Runs `task` on a pool thread. After Shutdown, the task is dropped.
  void Enqueue(std::function<void()> task);
  // Runs the tasks already queued, then stops and joins every thread.
  void Shutdown();

  // Threads started so far (they stay until Shutdown).
  size_t threads_started() const;
  // Tasks waiting for a thread.
  size_t queued() const;
  // Threads waiting for a task.
  size_t idle_threads() const;

 private:
  void Loop();

  const size_t max_threads_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;      // threads waiting for a task
  size_t starting_ ABSL_GUARDED_BY(mu_) = 0;  // started, not yet in Loop: each takes a task
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem
