#include "kv_transfer/fake/fake_network.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace tandem::fake {
namespace {

constexpr size_t kAlign = 64;

}  // namespace

HeapPool::HeapPool(int64_t bytes) : bytes_(bytes) {
  const size_t rounded =
      (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + kAlign - 1) / kAlign * kAlign;
  base_ = ::operator new(rounded, std::align_val_t(kAlign));
  std::memset(base_, 0, rounded);
}

HeapPool::~HeapPool() { ::operator delete(base_, std::align_val_t(kAlign)); }

std::string FakeWorkerAddress(const std::string& engine_id, uint64_t epoch, int32_t rank) {
  return absl::StrCat("fake://", engine_id, "/", epoch, "/", rank);
}

void FakeKvNetwork::SetFaults(const std::string& engine_id, FakeFaults faults) {
  absl::MutexLock lock(&mu_);
  EngineState& e = engines_[engine_id];
  e.faults = faults;
  e.copies = 0;
  e.bytes = 0;
  e.dead = false;
  e.peak_active_pulls = e.active_pulls;
}

void FakeKvNetwork::Resume(const std::string& engine_id) {
  absl::MutexLock lock(&mu_);
  engines_[engine_id].faults.paused = false;
}

int64_t FakeKvNetwork::copies(const std::string& engine_id) const {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(engine_id);
  return it == engines_.end() ? 0 : it->second.copies;
}

int64_t FakeKvNetwork::bytes(const std::string& engine_id) const {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(engine_id);
  return it == engines_.end() ? 0 : it->second.bytes;
}

int32_t FakeKvNetwork::paused_waiters(const std::string& engine_id) const {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(engine_id);
  return it == engines_.end() ? 0 : it->second.paused_waiters;
}

int32_t FakeKvNetwork::peak_active_pulls(const std::string& engine_id) const {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(engine_id);
  return it == engines_.end() ? 0 : it->second.peak_active_pulls;
}

absl::Duration FakeKvNetwork::copy_delay(const std::string& engine_id) const {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(engine_id);
  return it == engines_.end() ? absl::ZeroDuration() : it->second.faults.copy_delay;
}

bool FakeKvNetwork::lands_bytes_itself(const std::string& engine_id) const {
  absl::MutexLock lock(&mu_);
  const auto it = engines_.find(engine_id);
  return it != engines_.end() && it->second.faults.lands_bytes_itself;
}

void FakeKvNetwork::Register(const std::string& worker_address, Endpoint endpoint) {
  absl::MutexLock lock(&mu_);
  endpoints_[worker_address] = std::move(endpoint);
}

void FakeKvNetwork::Unregister(const std::string& worker_address) {
  absl::MutexLock lock(&mu_);
  endpoints_.erase(worker_address);
}

absl::StatusOr<FakeKvNetwork::Endpoint> FakeKvNetwork::Resolve(
    const std::string& engine_id, const std::string& worker_address) const {
  absl::MutexLock lock(&mu_);
  auto e = engines_.find(engine_id);
  if (e != engines_.end() && e->second.dead) {
    return absl::UnavailableError(
        absl::StrCat("fake source ", worker_address, " is dead (injected)"));
  }
  auto it = endpoints_.find(worker_address);
  if (it == endpoints_.end()) {
    return absl::UnavailableError(
        absl::StrCat("no fake source at ", worker_address, " (it was destroyed)"));
  }
  return it->second;
}

FakeKvNetwork::Verdict FakeKvNetwork::Admit(const std::string& engine_id, int64_t length) {
  absl::MutexLock lock(&mu_);
  EngineState& e = engines_[engine_id];
  const FakeFaults& f = e.faults;
  if (e.dead) return Verdict::kDead;
  if (f.paused) return Verdict::kPaused;
  if (f.stall_after_bytes >= 0 && e.bytes >= f.stall_after_bytes) return Verdict::kStall;
  if (f.die_after_bytes >= 0 && e.bytes >= f.die_after_bytes) {
    e.dead = true;
    return Verdict::kDead;
  }
  const int64_t index = e.copies++;
  if (index == f.fail_copy) return Verdict::kFail;
  if (index == f.short_copy) {
    e.bytes += length / 2;
    return Verdict::kShort;
  }
  e.bytes += length;
  return Verdict::kCopy;
}

bool FakeKvNetwork::AwaitResume(const std::string& engine_id, absl::Time deadline,
                                const CancellationToken* cancel) {
  // A cancel takes and drops mu_, which makes the wait below look at its condition again.
  // Registered before mu_ is held: on a cancelled token the callback runs here, at once.
  CancelCallback wake;
  if (cancel != nullptr) wake = cancel->OnCancel([this] { absl::MutexLock touch(&mu_); });
  absl::MutexLock lock(&mu_);
  EngineState& e = engines_[engine_id];
  ++e.paused_waiters;
  auto resumed_or_cancelled = [&e, cancel]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !e.faults.paused || (cancel != nullptr && cancel->cancelled());
  };
  mu_.AwaitWithDeadline(absl::Condition(&resumed_or_cancelled), deadline);
  --e.paused_waiters;
  return !e.faults.paused;
}

void FakeKvNetwork::PullStarted(const std::string& engine_id) {
  absl::MutexLock lock(&mu_);
  EngineState& e = engines_[engine_id];
  ++e.active_pulls;
  e.peak_active_pulls = std::max(e.peak_active_pulls, e.active_pulls);
}

void FakeKvNetwork::PullFinished(const std::string& engine_id) {
  absl::MutexLock lock(&mu_);
  --engines_[engine_id].active_pulls;
}

}  // namespace tandem::fake
