// The threads that run Generate requests (one per request, for the request's lifetime). Each
// thread moves itself to a "finished" list as its last act; finished threads are joined by the
// next Spawn or by JoinAll, so no thread is ever detached and shutdown can wait for all of them.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem {

class RequestThreads {
 public:
  RequestThreads() = default;
  ~RequestThreads() { JoinAll(); }
  RequestThreads(const RequestThreads&) = delete;
  RequestThreads& operator=(const RequestThreads&) = delete;

  void Spawn(std::function<void()> body);
  // Waits for every thread (each request bounds its own waits, so this ends).
  void JoinAll();
  // Waits until no thread runs its body or `deadline` passes (woken by each thread's end, not
  // polled); true when none runs. Joins nothing.
  bool AwaitIdle(absl::Time deadline) const;

 private:
  void Finished(uint64_t id);
  void JoinFinished();

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, std::thread> running_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
