#include "bench/serve/load_runner.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace tandem::bench {
namespace {

// Shared state of one run.
class RunState {
 public:
  RunState(Backend& backend, const RequestSource& source, const LoadOptions& options)
      : backend_(backend), source_(source), options_(options), start_(absl::Now()) {}

  absl::Time start() const { return start_; }
  const LoadOptions& options() const { return options_; }

  // False once no further request may start (count or time bound reached).
  bool MayStart(int64_t index) const {
    if (options_.max_requests > 0 && index >= options_.max_requests) return false;
    return absl::Now() - start_ < options_.max_duration;
  }

  void RunOne(int64_t index) {
    const BenchRequest request = source_.Make(index);
    sent_.fetch_add(1);
    const absl::Duration sent_at = absl::Now() - start_;
    RequestRecord rec = backend_.Send(request, options_.request_timeout);
    rec.sent_at = sent_at;
    const absl::Time end = absl::Now();
    absl::MutexLock lock(&mu_);
    if (!rec.ok) ++failed_;
    output_tokens_ += rec.ok ? rec.output_tokens : 0;
    records_.push_back(std::move(rec));
    last_end_ = std::max(last_end_, end);
    --in_flight_;
  }

  // Open loop: blocks until a slot is free (cap > 0), then takes it.
  void AcquireSlot() {
    absl::MutexLock lock(&mu_);
    const int cap = options_.max_concurrency;
    if (cap > 0) {
      auto free = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ < cap; };
      mu_.Await(absl::Condition(&free));
    }
    ++in_flight_;
  }
  void TakeSlot() {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }

  // Progress line until `stop` is notified.
  void ProgressLoop(absl::Notification& stop) {
    int64_t last_done = 0, last_tokens = 0;
    absl::Time last = start_;
    while (!stop.WaitForNotificationWithTimeout(options_.progress_interval)) {
      int64_t done, failed, tokens;
      {
        absl::MutexLock lock(&mu_);
        done = static_cast<int64_t>(records_.size());
        failed = failed_;
        tokens = output_tokens_;
      }
      const absl::Time now = absl::Now();
      const double dt = absl::ToDoubleSeconds(now - last);
      *options_.progress << absl::StrFormat(
                                "\r[%6.1fs] sent %d  done %d  failed %d  |  %.2f req/s  %.1f "
                                "out tok/s   ",
                                absl::ToDoubleSeconds(now - start_), sent_.load(), done, failed,
                                (done - last_done) / dt, (tokens - last_tokens) / dt)
                         << std::flush;
      last_done = done;
      last_tokens = tokens;
      last = now;
    }
    *options_.progress << "\n" << std::flush;
  }

  LoadResult Finish() {
    absl::MutexLock lock(&mu_);
    LoadResult result;
    result.duration = records_.empty() ? absl::ZeroDuration() : last_end_ - start_;
    result.records = std::move(records_);
    return result;
  }

 private:
  Backend& backend_;
  const RequestSource& source_;
  const LoadOptions& options_;
  const absl::Time start_;
  std::atomic<int64_t> sent_{0};
  absl::Mutex mu_;
  std::vector<RequestRecord> records_ ABSL_GUARDED_BY(mu_);
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t output_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace

absl::StatusOr<LoadResult> RunLoad(Backend& backend, const RequestSource& source,
                                   const LoadOptions& options) {
  const bool closed = options.concurrency > 0;
  const bool open = !options.arrivals.empty();
  if (closed == open) {
    return absl::InvalidArgumentError(
        "load: give exactly one of a concurrency (> 0) or a non-empty arrival schedule");
  }
  if (closed && options.max_requests <= 0 && options.max_duration == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        "load: a closed-loop run needs a request count or a duration bound");
  }
  RunState state(backend, source, options);
  absl::Notification stop_progress;
  std::thread progress;
  if (options.progress != nullptr) {
    progress = std::thread([&] { state.ProgressLoop(stop_progress); });
  }
  std::vector<std::thread> threads;
  if (closed) {
    std::atomic<int64_t> next{0};
    for (int w = 0; w < options.concurrency; ++w) {
      threads.emplace_back([&] {
        for (int64_t i = next.fetch_add(1); state.MayStart(i); i = next.fetch_add(1)) {
          state.TakeSlot();
          state.RunOne(i);
        }
      });
    }
    for (std::thread& t : threads) t.join();
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(options.arrivals.size()); ++i) {
      if (options.arrivals[i] >= options.max_duration) break;
      absl::SleepFor(state.start() + options.arrivals[i] - absl::Now());
      if (!state.MayStart(i)) break;
      state.AcquireSlot();
      threads.emplace_back([&state, i] { state.RunOne(i); });
    }
    for (std::thread& t : threads) t.join();
  }
  if (progress.joinable()) {
    stop_progress.Notify();
    progress.join();
  }
  return state.Finish();
}

}  // namespace tandem::bench
