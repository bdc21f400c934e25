// WorkerProgressThread: keeps a UCX worker progressing on a dedicated thread.
//
// Why: gets that UCX cannot do one-sidedly (TCP between hosts, or memory that was only
// registered) are served by the *source* worker's progress; a source that stops progressing
// hangs every reader (docs/kv_transfer.md). The thread blocks on the worker's event fd
// (ucp_worker_arm + poll) between events instead of spinning: the machines have 2 cores.
//
// Ownership: borrows the worker. REQUIRES: the worker outlives this object, and while it runs
// no other thread calls into the worker (UcxWorker::Signal excepted). Destruction stops and
// joins the thread; it returns within one `max_sleep` at worst.
#pragma once

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

class WorkerProgressThread {
 public:
  // `max_sleep` bounds each blocking wait (a safety net: UCX signals the event fd itself).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<WorkerProgressThread>> Start(
      UcxWorker* worker, absl::Duration max_sleep = absl::Milliseconds(100));
  ~WorkerProgressThread();
  WorkerProgressThread(const WorkerProgressThread&) = delete;
  WorkerProgressThread& operator=(const WorkerProgressThread&) = delete;

  // First error the loop met (it keeps running, sleeping `max_sleep` between attempts).
  absl::Status error() const;

 private:
  WorkerProgressThread(UcxWorker* worker, absl::Duration max_sleep)
      : worker_(worker), max_sleep_(max_sleep) {}
  void Run();

  UcxWorker* const worker_;
  const absl::Duration max_sleep_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tandem
