// QueuedWriteReactor<Message>: the server side of one server-streaming call (gRPC callback API)
// whose work runs on a thread of its own (serving/call_threads.h), because it blocks. That thread
// queues messages with Send and ends the stream with Close; the reactor writes them one at a time
// (StartWrite, OnWriteDone) and turns gRPC's OnCancel — the client cancelled, its deadline
// passed, the server is shutting down — and a failed write into a cancellation of the call's
// CancellationToken, which everything the call waits on wakes on (common/cancellation.h,
// docs/design.md#cancellation): no poll.
//
// Backpressure: Send blocks while `max_queued` messages wait to be written (one more may be in
// flight), as a synchronous Write blocks on a slow client, so a client that reads slowly holds
// back the work thread instead of growing a queue (kUnboundedQueue: Send never blocks, for a
// sender that must not, such as the router's relay on gRPC's threads). Send returns once a write
// completes, a write fails or the call is cancelled: bounded by the client's deadline and, at the
// latest, by the server's shutdown, which cancels the calls left after the drain timeout.
//
// Lifetime: created with new by the service's method handler (and returned to gRPC), deleted in
// OnDone, which gRPC calls only after Finish. The work thread touches the reactor for the last
// time in Close(); Finish is called once, after Close and once every queued message was written
// (or a write failed), by whichever of Close and OnWriteDone comes last. gRPC may run OnWriteDone
// and OnDone inline in StartWrite and Finish, so neither is called with mu_ held and nothing
// touches members after Finish. REQUIRES: every CancelCallback registered on cancel() is destroyed
// before Close.
//
// A subclass may add trailing metadata in BeforeFinish, called once, right before Finish, without
// the reactor's mutex held.
//
// Thread-safety: Send and Close from the call's one work thread (or, for a call refused before
// its thread started, the method handler; with kUnboundedQueue, Send from any one thread at a
// time); cancel() from any thread; the rest is gRPC's.
#pragma once

#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <deque>
#include <limits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/cancellation.h"

namespace tandem {

inline constexpr size_t kUnboundedQueue = std::numeric_limits<size_t>::max();

template <typename Message>
class QueuedWriteReactor : public grpc::ServerWriteReactor<Message> {
 public:
  // REQUIRES: max_queued >= 1.
  explicit QueuedWriteReactor(size_t max_queued) : max_queued_(max_queued) {}

  // The call's token: cancelled by OnCancel or a failed write (the client is gone).
  const CancellationToken& cancel() const { return cancel_; }

  // Queues `message` for writing; blocks while max_queued messages wait (see above). False, and
  // the message dropped, once a write failed or the call was cancelled.
  bool Send(Message message) {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return broken_ || cancelled_ || queue_.size() < max_queued_;
      };
      mu_.Await(absl::Condition(&room));
      if (broken_ || cancelled_) return false;
      if (writing_) {
        queue_.push_back(std::move(message));
        return true;
      }
      writing_ = true;
      current_ = std::move(message);
    }
    this->StartWrite(&current_);
    return true;
  }

  // Ends the stream with `status` once every queued message was written. The work thread's last
  // touch of the reactor.
  void Close(grpc::Status status) {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      final_status_ = status;
      if (!writing_ && !finished_) {
        finished_ = true;
        finish = true;
      }
    }
    if (finish) FinishNow(std::move(status));  // may delete this; nothing may follow
  }

  void OnWriteDone(bool ok) override {
    bool write_next = false;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        broken_ = true;
        queue_.clear();
      }
      if (!queue_.empty()) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
        write_next = true;
      } else {
        writing_ = false;
        if (closing_ && !finished_) {
          finished_ = true;
          finish = true;
          status = final_status_;
        }
      }
    }
    if (!ok) cancel_.Cancel();  // nobody is reading any more
    if (write_next) {
      this->StartWrite(&current_);
    } else if (finish) {
      FinishNow(std::move(status));
    }
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;  // wakes a blocked Send
    }
    cancel_.Cancel();
  }

  void OnDone() override { delete this; }

 protected:
  // Right before Finish (trailing metadata), once, without mu_ held.
  virtual void BeforeFinish() {}

 private:
  void FinishNow(grpc::Status status) {
    BeforeFinish();
    this->Finish(std::move(status));
  }

  const size_t max_queued_;
  CancellationToken cancel_;
  absl::Mutex mu_;
  std::deque<Message> queue_ ABSL_GUARDED_BY(mu_);  // waiting; the one in flight is current_
  Message current_;  // the write in flight (touched only by the writing side)
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;     // a write failed: the client is gone
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // OnCancel ran
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish was called (or is about to be)
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
