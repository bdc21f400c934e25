#include "serving/call_threads.h"

#include <utility>

namespace tandem {

CallThreads::CallThreads(int64_t max_threads) : max_threads_(max_threads) {}

CallThreads::~CallThreads() { JoinAll(); }

void CallThreads::JoinAll() {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::unordered_map<uint64_t, std::thread>* m) { return m->empty(); }, &running_));
  }
  JoinFinished();
}

bool CallThreads::AwaitIdle(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](const std::unordered_map<uint64_t, std::thread>* m) { return m->empty(); },
          &running_),
      deadline);
}

bool CallThreads::TrySpawn(absl::AnyInvocable<void() &&> body) {
  JoinFinished();
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(running_.size()) >= max_threads_) return false;
  const uint64_t id = next_id_++;
  // The thread's Finished() blocks on mu_ until this assignment is done.
  running_[id] = std::thread([this, id, body = std::move(body)]() mutable {
    {
      absl::AnyInvocable<void()&&> run = std::move(body);  // its captures go before Finished
      std::move(run)();
    }
    Finished(id);
  });
  return true;
}

int64_t CallThreads::running() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(running_.size());
}

void CallThreads::Finished(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(id);
  finished_.push_back(std::move(it->second));
  running_.erase(it);
}

void CallThreads::JoinFinished() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(finished_);
  }
  for (std::thread& t : done) t.join();
}

}  // namespace tandem
