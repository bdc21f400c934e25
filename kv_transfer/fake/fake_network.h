// An in-process KV "fabric" for node-level tests (no processes, no UCX): FakeKvSource pools
// register on a FakeKvNetwork, FakeKvPullers copy real bytes out of them, and faults injected per
// source engine id make those copies fail, stall, complete short or find the source dead
// (tests/kv_transfer/fake_transport_test.cc, tests/decode_node/).
//
// A source rank is reached through its worker address "fake://<engine>/<epoch>/<rank>"; its
// rkey is a well-formed empty UCX rkey (so ValidateTransferMetadata accepts it) followed by the
// same name, and a puller refuses metadata whose pool_base, pool_bytes or rkey differ from what
// the rank registered (INVALID_ARGUMENT), as a real transport would fail to use them.
//
// Thread-safety: all methods are thread-safe; pullers of several ranks copy concurrently.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "common/kv_pool_memory.h"
#include "kv_transfer/transfer_types.h"

namespace tandem::fake {

// Faults for every pull from one source engine id. Counters (copy index, bytes) start at zero
// when the faults are set and run across all pullers and Execute calls.
struct FakeFaults {
  int64_t fail_copy = -1;          // this copy fails: UNAVAILABLE, its source rank blamed
  int64_t short_copy = -1;         // this copy "succeeds" but moves half its bytes: DATA_LOSS
  int64_t stall_after_bytes = -1;  // then no copy completes: DEADLINE_EXCEEDED or CANCELLED
  int64_t die_after_bytes = -1;    // then the source is dead: UNAVAILABLE now and for later pulls
  bool paused = false;             // copies wait (bounded by stall_timeout) until Resume
  absl::Duration copy_delay = absl::ZeroDuration();  // per copy: a slow link, still progress
  // The link lands the bytes itself, as UCX gets over TCP or RDMA do: the puller computes no
  // copy CRCs (PullOptions::copy_crcs stays uncomputed), so a digest check reads them back.
  bool lands_bytes_itself = false;
};

// Memory a fake pool owns: zeroed, 64-byte aligned.
class HeapPool final : public KvPoolMemory {
 public:
  explicit HeapPool(int64_t bytes);
  ~HeapPool() override;
  HeapPool(const HeapPool&) = delete;
  HeapPool& operator=(const HeapPool&) = delete;
  void* base() const override { return base_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* base_;
  int64_t bytes_;
};

class FakeKvNetwork {
 public:
  // What one registered source rank is; shared so a pull in flight keeps the memory alive (as a
  // UCX shared-memory mapping outlives the source process).
  struct Endpoint {
    RankTransferInfo info;
    std::shared_ptr<HeapPool> pool;
  };
  // What a puller should do with its next copy from `engine_id`.
  enum class Verdict { kCopy, kFail, kShort, kStall, kDead, kPaused };

  FakeKvNetwork() = default;
  FakeKvNetwork(const FakeKvNetwork&) = delete;
  FakeKvNetwork& operator=(const FakeKvNetwork&) = delete;

  // Replaces the faults of `engine_id` and restarts its counters.
  void SetFaults(const std::string& engine_id, FakeFaults faults);
  void Resume(const std::string& engine_id);  // clears `paused`, waking waiting copies

  // Observability for tests (all counted since the last SetFaults of the engine id).
  int64_t copies(const std::string& engine_id) const;
  int64_t bytes(const std::string& engine_id) const;
  int32_t paused_waiters(const std::string& engine_id) const;     // copies waiting on `paused` now
  int32_t peak_active_pulls(const std::string& engine_id) const;  // concurrent Executes, max
  absl::Duration copy_delay(const std::string& engine_id) const;
  bool lands_bytes_itself(const std::string& engine_id) const;

  // --- used by FakeKvSource / FakeKvPuller ---
  void Register(const std::string& worker_address, Endpoint endpoint);
  void Unregister(const std::string& worker_address);
  // UNAVAILABLE when nothing is registered there (the source is gone) or the engine is dead.
  absl::StatusOr<Endpoint> Resolve(const std::string& engine_id,
                                   const std::string& worker_address) const;
  // Decides copy number copies(engine_id) of `length` bytes and counts it if it moves bytes.
  Verdict Admit(const std::string& engine_id, int64_t length);
  // Blocks while `engine_id` is paused, at most until `deadline` or `cancel` (may be null) is
  // cancelled (woken at once). True if resumed.
  bool AwaitResume(const std::string& engine_id, absl::Time deadline,
                   const CancellationToken* cancel);
  void PullStarted(const std::string& engine_id);
  void PullFinished(const std::string& engine_id);

 private:
  struct EngineState {
    FakeFaults faults;
    int64_t copies = 0;
    int64_t bytes = 0;
    bool dead = false;
    int32_t paused_waiters = 0;
    int32_t active_pulls = 0;
    int32_t peak_active_pulls = 0;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Endpoint> endpoints_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, EngineState> engines_ ABSL_GUARDED_BY(mu_);
};

// "fake://<engine>/<epoch>/<rank>"
std::string FakeWorkerAddress(const std::string& engine_id, uint64_t epoch, int32_t rank);

}  // namespace tandem::fake
