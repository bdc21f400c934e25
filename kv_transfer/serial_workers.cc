#include "kv_transfer/serial_workers.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem {

SerialWorkers::SerialWorkers(std::string name, int32_t lanes, int32_t capacity)
    : name_(std::move(name)), capacity_(capacity < 1 ? 1 : capacity) {
  for (int32_t i = 0; i < lanes; ++i) lanes_.push_back(std::make_unique<Lane>());
  for (auto& lane : lanes_) lane->thread = std::thread([this, l = lane.get()] { Loop(l); });
}

SerialWorkers::~SerialWorkers() {
  for (auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    lane->stopping = true;
  }
  for (auto& lane : lanes_) lane->thread.join();
}

absl::Status SerialWorkers::Submit(int32_t lane, Job job, absl::Time deadline) {
  if (lane < 0 || lane >= lanes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": lane ", lane, " out of range [0, ", lanes(), ")"));
  }
  Lane& l = *lanes_[lane];
  absl::MutexLock lock(&l.mu);
  auto room = [&l, this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(l.mu) {
    return l.stopping || static_cast<int32_t>(l.queue.size()) < capacity_;
  };
  if (!l.mu.AwaitWithDeadline(absl::Condition(&room), deadline)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, " ", lane, ": ", capacity_, " jobs already queued until the deadline"));
  }
  if (l.stopping) return absl::CancelledError(absl::StrCat(name_, " is shutting down"));
  l.queue.push_back(std::move(job));
  return absl::OkStatus();
}

int32_t SerialWorkers::pending(int32_t lane) const {
  const Lane& l = *lanes_[lane];
  absl::MutexLock lock(&l.mu);
  return static_cast<int32_t>(l.queue.size()) + (l.running ? 1 : 0);
}

void SerialWorkers::Loop(Lane* lane) {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&lane->mu);
      lane->running = false;
      auto ready = [lane]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane->mu) {
        return lane->stopping || !lane->queue.empty();
      };
      lane->mu.Await(absl::Condition(&ready));
      if (lane->queue.empty()) return;  // stopping, and every queued job ran
      job = std::move(lane->queue.front());
      lane->queue.pop_front();
      lane->running = true;
    }
    std::move(job)();
  }
}

}  // namespace tandem
