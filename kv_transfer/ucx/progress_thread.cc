#include "kv_transfer/ucx/progress_thread.h"

#include <system_error>

#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<WorkerProgressThread>> WorkerProgressThread::Start(
    UcxWorker* worker, absl::Duration max_sleep) {
  std::unique_ptr<WorkerProgressThread> self(new WorkerProgressThread(worker, max_sleep));
  try {
    self->thread_ = std::thread([p = self.get()] { p->Run(); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("starting UCX progress thread: ", e.what()));
  }
  return self;
}

WorkerProgressThread::~WorkerProgressThread() {
  stop_.Notify();
  worker_->Signal();
  thread_.join();
}

absl::Status WorkerProgressThread::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

void WorkerProgressThread::Run() {
  while (!stop_.HasBeenNotified()) {
    worker_->ProgressAll();
    absl::Status status = worker_->WaitForEvent(max_sleep_);
    if (!status.ok()) {
      {
        absl::MutexLock lock(&mu_);
        if (error_.ok()) error_ = status;
      }
      // Without a working event fd, fall back to a bounded poll instead of spinning.
      stop_.WaitForNotificationWithTimeout(max_sleep_);
    }
  }
}

}  // namespace tandem
