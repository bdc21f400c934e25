#include "serving/on_demand_pool.h"

#include <utility>

namespace tandem {

OnDemandPool::OnDemandPool(size_t max_threads) : max_threads_(max_threads < 1 ? 1 : max_threads) {}

OnDemandPool::~OnDemandPool() { Shutdown(); }

void OnDemandPool::Enqueue(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return;
  queue_.push_back(std::move(task));
  // Every queued task has a thread coming for it (an idle one, or one starting), or all
  // max_threads_ are busy and the first to finish takes it.
  if (queue_.size() > idle_ + starting_ && threads_.size() < max_threads_) {
    ++starting_;
    threads_.emplace_back([this] { Loop(); });
  }
}

void OnDemandPool::Loop() {
  absl::MutexLock lock(&mu_);
  --starting_;
  const auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || shutdown_;
  };
  while (true) {
    if (!queue_.empty()) {
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      mu_.Unlock();
      task();
      task = nullptr;  // destroyed outside the lock too
      mu_.Lock();
      continue;
    }
    if (shutdown_) return;
    ++idle_;
    mu_.Await(absl::Condition(&has_work));
    --idle_;
  }
}

void OnDemandPool::Shutdown() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

size_t OnDemandPool::threads_started() const {
  absl::MutexLock lock(&mu_);
  return threads_.size();
}

size_t OnDemandPool::idle_threads() const {
  absl::MutexLock lock(&mu_);
  return idle_;
}

size_t OnDemandPool::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace tandem
