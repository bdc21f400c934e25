// SerialWorkers: a fixed set of persistent worker threads ("lanes"), each running the jobs
// submitted to it one at a time, in order (docs/design.md#pulling-kv). The decode node keeps one
// lane per rank for that rank's KvPuller (a puller is thread-compatible: one caller at a time,
// and its connections live on its thread) plus one for KV digest checks, instead of starting a
// thread per rank per pull.
//
// Each lane has a bounded queue (`capacity` jobs waiting, besides the one running). Submit
// waits for room until its deadline (RESOURCE_EXHAUSTED naming the lane) and is refused once
// shutdown began (CANCELLED). A submitted job always runs — there is no way to drop one — so a
// caller that submitted jobs referencing its own state waits for them (e.g. with JobGroup) and
// nothing is left touching that state after it returns, whatever happened. Jobs should watch a
// cancellation token of their own to end early.
//
// The destructor stops accepting jobs, lets every queued job run, and joins the threads.
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem {

class SerialWorkers {
 public:
  using Job = absl::AnyInvocable<void() &&>;

  // `name` labels errors ("KV pull lane 1"). REQUIRES: lanes >= 1, capacity >= 1.
  SerialWorkers(std::string name, int32_t lanes, int32_t capacity);
  ~SerialWorkers();
  SerialWorkers(const SerialWorkers&) = delete;
  SerialWorkers& operator=(const SerialWorkers&) = delete;

  // Queues `job` on `lane`. INVALID_ARGUMENT for a lane out of range; RESOURCE_EXHAUSTED when
  // the lane's queue stays full until `deadline`; CANCELLED after shutdown began. On error the
  // job was not queued (and is destroyed without running).
  [[nodiscard]] absl::Status Submit(int32_t lane, Job job, absl::Time deadline);

  int32_t lanes() const { return static_cast<int32_t>(lanes_.size()); }
  // Jobs waiting or running on `lane`, for tests and metrics.
  int32_t pending(int32_t lane) const;

 private:
  struct Lane {
    mutable absl::Mutex mu;
    std::deque<Job> queue ABSL_GUARDED_BY(mu);
    bool running ABSL_GUARDED_BY(mu) = false;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    std::thread thread;
  };
  void Loop(Lane* lane);

  const std::string name_;
  const int32_t capacity_;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

// Counts the jobs of one caller so it can wait for all of them: Add() before each Submit (Done()
// right away when the Submit fails), Done() as the last thing each job does. WaitFor is bounded
// by its timeout; a caller whose jobs reference its own state loops on it until it returns true
// (jobs that wait on a cancellation token end promptly). Thread-safety: thread-safe.
class JobGroup {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    ++pending_;
  }
  void Done() {
    absl::MutexLock lock(&mu_);
    --pending_;
  }
  // Waits until nothing is pending or `timeout` passed; whether nothing is pending.
  bool WaitFor(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }

 private:
  absl::Mutex mu_;
  int32_t pending_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem
