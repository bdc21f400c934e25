// An in-process prefill side for DecodeNode tests: a PrefillClient whose "prefill instances"
// are FakeKvSources on a FakeKvNetwork, and whose leases live in a real LeaseTable with the
// prefill node's semantics (expired leases are reaped before every call). Knobs make renewals
// and releases fail as RPCs would; counters let tests assert what the node asked for. Handles
// carry block generations (all 1) and, unless set_send_digests(false), the KV digests of the
// source pools as they are when Lease is called (kv_transfer/kv_digest.h).
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "decode_node/prefill_client.h"
#include "kv_transfer/fake/fake_kv_source.h"
#include "prefill_node/lease_table.h"

namespace tandem::testing {

class FakePrefill final : public PrefillClient {
 public:
  explicit FakePrefill(absl::Duration lease) : lease_(lease) {}

  // Serves `source`'s metadata at `address`. REQUIRES: source outlives this.
  void AddInstance(const std::string& address, const fake::FakeKvSource* source);
  // A lease on the first ceil(num_tokens / B) blocks of the instance at `address` (the block
  // ids are never handed out twice: the table only tracks leases).
  KvHandle Lease(const std::string& address, const std::string& request_id, int64_t num_tokens);
  void Revoke(const KvHandle& kv);  // kv's lease is gone (as if reaped)
  void ExpireAll();                 // every lease expires now (the prefill reaped them)

  // The digests of kv's KV as the pools hold it now (for scripted pipelined progress).
  std::vector<uint32_t> DigestsOf(const KvHandle& kv);
  void set_send_digests(bool v);
  void set_renew_fails(bool v);
  void set_release_fails(bool v);
  // Called (outside the fake's lock) after every answered release.
  void set_after_release(std::function<void()> fn);

  int32_t leases();         // held now
  int32_t renewals();       // successful
  int32_t renew_calls();    // all, failed ones included
  int32_t releases();       // calls answered (held or not)
  int32_t releases_held();  // answered "held"

  absl::StatusOr<TransferMetadata> GetTransferMetadata(const std::string& address,
                                                       absl::Time deadline) override;
  absl::StatusOr<std::optional<absl::Time>> RenewLease(const KvHandle& kv,
                                                       absl::Time deadline) override;
  absl::StatusOr<bool> ReleaseKv(const KvHandle& kv, absl::Time deadline) override;
  // Pipelined prefills: the next WatchKv call's stream replays `script` in order — progress
  // messages and, optionally, an error that ends it; once the script is spent the stream stays
  // silent (a stuck prefill node). Without a script WatchKv is UNIMPLEMENTED (prefill_node_test
  // drives real pipelined prefills in process).
  using WatchStep = absl::StatusOr<KvProgressEvent>;
  void ScriptWatch(std::vector<WatchStep> script);
  int32_t watches();  // WatchKv calls answered
  // Next calls that found the script spent and began waiting (the decode node is idle, waiting
  // for progress).
  int32_t silent_waits() const { return silent_waits_->load(); }
  absl::StatusOr<std::unique_ptr<KvWatch>> WatchKv(const KvHandle& kv,
                                                   absl::Time deadline) override;

 private:
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<uint32_t> Digests(const KvHandle& kv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration lease_;
  absl::Mutex mu_;
  std::map<std::string, const fake::FakeKvSource*> instances_ ABSL_GUARDED_BY(mu_);
  LeaseTable table_ ABSL_GUARDED_BY(mu_);
  bool renew_fails_ ABSL_GUARDED_BY(mu_) = false;
  bool release_fails_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> after_release_ ABSL_GUARDED_BY(mu_);
  bool send_digests_ ABSL_GUARDED_BY(mu_) = true;
  int32_t renewals_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t renew_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t releases_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t releases_held_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<std::vector<WatchStep>> script_ ABSL_GUARDED_BY(mu_);
  int32_t watches_ ABSL_GUARDED_BY(mu_) = 0;
  const std::shared_ptr<std::atomic<int32_t>> silent_waits_ =
      std::make_shared<std::atomic<int32_t>>(0);
};

}  // namespace tandem::testing
