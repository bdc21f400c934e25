// The admission gate of a draining instance. Each new unit of work (a Prefill or Decode call)
// takes a Pass through Enter(); once StartDrain() was called Enter() refuses, so the service
// answers UNAVAILABLE and the router retries on another instance. WaitIdle() blocks until every
// Pass is returned (bounded), which is how the process knows its in-flight work finished.
//
// It also bounds the instance's queue (--max_queued_requests, docs/security.md): Admit() refuses
// with RESOURCE_EXHAUSTED when the work already admitted minus what the engine is running now
// has reached the limit, so a flood of calls cannot pile up unbounded waiting threads and
// requests. The check and the admission are one step under the gate's lock, so concurrent
// arrivals never overshoot the limit.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem {

class DrainGate {
 public:
  // Held for the duration of one unit of work; returns it to the gate when destroyed.
  class Pass {
   public:
    Pass(Pass&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
    Pass& operator=(Pass&&) = delete;
    Pass(const Pass&) = delete;
    ~Pass();

   private:
    friend class DrainGate;
    explicit Pass(DrainGate* gate) : gate_(gate) {}
    DrainGate* gate_;
  };

  // A pass, or nullopt once the gate is draining.
  std::optional<Pass> Enter();
  // A pass, or UNAVAILABLE once draining, or RESOURCE_EXHAUSTED when (passes out) - `running`
  // >= the queue limit. `running`: the requests the engine runs now (they hold passes too).
  absl::StatusOr<Pass> Admit(int64_t running);
  // 0 = no limit (the default).
  void SetQueueLimit(int64_t max_queued);
  // From now on Enter() refuses. Idempotent.
  void StartDrain();
  bool draining() const;
  int64_t in_flight() const;
  // True once no pass is out (returns at once when none is); false when `deadline` passed first.
  bool WaitIdle(absl::Time deadline) const;

 private:
  void Leave();

  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_queued_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem
