#include "tests/decode_node/fake_prefill.h"

#include "absl/strings/str_cat.h"
#include "kv_transfer/kv_digest.h"

namespace tandem::testing {
namespace {

// Replays a script; silent afterwards (Next waits out its timeout or a cancel: a stuck prefill
// node).
class ScriptedWatch final : public KvWatch {
 public:
  ScriptedWatch(std::vector<FakePrefill::WatchStep> script,
                std::shared_ptr<std::atomic<int32_t>> silent_waits)
      : script_(std::move(script)), silent_waits_(std::move(silent_waits)) {}
  absl::StatusOr<std::optional<KvProgressEvent>> Next(absl::Duration timeout,
                                                      const CancellationToken& cancel) override {
    if (next_ < script_.size()) {
      const FakePrefill::WatchStep& step = script_[next_++];
      if (!step.ok()) return step.status();
      return std::optional<KvProgressEvent>(*step);
    }
    silent_waits_->fetch_add(1);
    cancel.WaitFor(timeout);
    return std::optional<KvProgressEvent>();
  }

 private:
  std::vector<FakePrefill::WatchStep> script_;
  const std::shared_ptr<std::atomic<int32_t>> silent_waits_;
  size_t next_ = 0;
};

}  // namespace

void FakePrefill::ScriptWatch(std::vector<WatchStep> script) {
  absl::MutexLock lock(&mu_);
  script_ = std::move(script);
}

int32_t FakePrefill::watches() {
  absl::MutexLock lock(&mu_);
  return watches_;
}

absl::StatusOr<std::unique_ptr<KvWatch>> FakePrefill::WatchKv(const KvHandle&, absl::Time) {
  absl::MutexLock lock(&mu_);
  if (!script_.has_value()) {
    return absl::UnimplementedError("FakePrefill has no scripted pipelined prefill");
  }
  ++watches_;
  return std::unique_ptr<KvWatch>(new ScriptedWatch(*std::move(script_), silent_waits_));
}

void FakePrefill::AddInstance(const std::string& address, const fake::FakeKvSource* source) {
  absl::MutexLock lock(&mu_);
  instances_[address] = source;
}

KvHandle FakePrefill::Lease(const std::string& address, const std::string& request_id,
                            int64_t num_tokens) {
  absl::MutexLock lock(&mu_);
  const TransferMetadata& m = instances_.at(address)->metadata();
  KvHandle kv;
  kv.engine_id = m.engine_id;
  kv.epoch = m.epoch;
  kv.request_id = request_id;
  const int32_t b = m.layout.parallel.block_size;
  for (int32_t i = 0; i < (num_tokens + b - 1) / b; ++i) kv.block_table.push_back(i);
  kv.num_tokens = num_tokens;
  kv.layout = m.layout;
  kv.lease_expiry = absl::Now() + lease_;
  kv.generation = table_.Add(request_id, kv.block_table, kv.lease_expiry);
  kv.prefill_address = address;
  kv.block_generations.assign(kv.block_table.size(), 1);
  if (send_digests_) kv.kv_digests = Digests(kv);
  return kv;
}

std::vector<uint32_t> FakePrefill::Digests(const KvHandle& kv) {
  const fake::FakeKvSource* source = instances_.at(kv.prefill_address);
  std::vector<absl::Span<const std::byte>> pools;
  for (int32_t r = 0; r < source->world(); ++r) {
    const KvPoolMemory& p = source->pool(r);
    pools.emplace_back(static_cast<const std::byte*>(p.base()), static_cast<size_t>(p.bytes()));
  }
  absl::StatusOr<std::vector<uint32_t>> d = ComputeKvDigests(
      source->metadata().layout, pools, kv.num_tokens,
      KvDigestBinding{kv.request_id, kv.generation, kv.block_table, kv.block_generations});
  return d.ok() ? *std::move(d) : std::vector<uint32_t>();
}

std::vector<uint32_t> FakePrefill::DigestsOf(const KvHandle& kv) {
  absl::MutexLock lock(&mu_);
  return Digests(kv);
}

void FakePrefill::set_send_digests(bool v) {
  absl::MutexLock lock(&mu_);
  send_digests_ = v;
}

void FakePrefill::Revoke(const KvHandle& kv) {
  absl::MutexLock lock(&mu_);
  table_.Release(kv.request_id, kv.generation);
}

void FakePrefill::ExpireAll() {
  absl::MutexLock lock(&mu_);
  table_.TakeExpired(absl::InfiniteFuture());
}

void FakePrefill::set_renew_fails(bool v) {
  absl::MutexLock lock(&mu_);
  renew_fails_ = v;
}

void FakePrefill::set_after_release(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  after_release_ = std::move(fn);
}

void FakePrefill::set_release_fails(bool v) {
  absl::MutexLock lock(&mu_);
  release_fails_ = v;
}

int32_t FakePrefill::leases() {
  absl::MutexLock lock(&mu_);
  Reap();
  return table_.size();
}

int32_t FakePrefill::renewals() {
  absl::MutexLock lock(&mu_);
  return renewals_;
}

int32_t FakePrefill::renew_calls() {
  absl::MutexLock lock(&mu_);
  return renew_calls_;
}

int32_t FakePrefill::releases() {
  absl::MutexLock lock(&mu_);
  return releases_;
}

int32_t FakePrefill::releases_held() {
  absl::MutexLock lock(&mu_);
  return releases_held_;
}

void FakePrefill::Reap() { table_.TakeExpired(absl::Now()); }

absl::StatusOr<TransferMetadata> FakePrefill::GetTransferMetadata(const std::string& address,
                                                                  absl::Time) {
  absl::MutexLock lock(&mu_);
  auto it = instances_.find(address);
  if (it == instances_.end()) {
    return absl::UnavailableError(absl::StrCat("no fake prefill at ", address));
  }
  return it->second->metadata();
}

absl::StatusOr<std::optional<absl::Time>> FakePrefill::RenewLease(const KvHandle& kv, absl::Time) {
  absl::MutexLock lock(&mu_);
  ++renew_calls_;
  if (renew_fails_) return absl::UnavailableError("renew: connection refused (injected)");
  Reap();
  std::optional<absl::Time> expiry =
      table_.Renew(kv.request_id, kv.generation, absl::Now() + lease_);
  if (expiry.has_value()) ++renewals_;
  return expiry;
}

absl::StatusOr<bool> FakePrefill::ReleaseKv(const KvHandle& kv, absl::Time) {
  bool held = false;
  std::function<void()> after;
  {
    absl::MutexLock lock(&mu_);
    if (release_fails_) return absl::UnavailableError("release: connection refused (injected)");
    Reap();
    ++releases_;
    held = table_.Release(kv.request_id, kv.generation).has_value();
    if (held) ++releases_held_;
    after = after_release_;
  }
  if (after) after();
  return held;
}

}  // namespace tandem::testing
