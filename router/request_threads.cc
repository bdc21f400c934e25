#include "router/request_threads.h"

#include <utility>

namespace tandem {

void RequestThreads::Spawn(std::function<void()> body) {
  JoinFinished();
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  // The thread's Finished() blocks on mu_ until this assignment is done.
  running_[id] = std::thread([this, id, body = std::move(body)] {
    body();
    Finished(id);
  });
}

void RequestThreads::Finished(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(id);
  finished_.push_back(std::move(it->second));
  running_.erase(it);
}

void RequestThreads::JoinFinished() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(finished_);
  }
  for (std::thread& t : done) t.join();
}

void RequestThreads::JoinAll() {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::unordered_map<uint64_t, std::thread>* m) { return m->empty(); }, &running_));
  }
  JoinFinished();
}

bool RequestThreads::AwaitIdle(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](const std::unordered_map<uint64_t, std::thread>* m) { return m->empty(); },
          &running_),
      deadline);
}

}  // namespace tandem
