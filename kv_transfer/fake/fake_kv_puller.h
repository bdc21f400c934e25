// FakeKvPuller: a KvPuller (kv_transfer/kv_puller.h) that copies real bytes out of FakeKvSource
// pools on a FakeKvNetwork, one copy at a time, applying the faults set on the network for the
// source's engine id. It keeps KvPuller's whole contract (validation before anything moves,
// stall → DEADLINE_EXCEEDED, cancel → CANCELLED, failed peer → UNAVAILABLE with the rank
// blamed, short completion → DATA_LOSS) — the stall/cancel/blame decisions are the PullWatchdog
// (kv_transfer/pull_watchdog.h) UcxKvPuller uses too; max_in_flight is accepted but copies are
// sequential.
// Thread-safety: thread-compatible, like every KvPuller.
#pragma once

#include <memory>

#include "kv_transfer/fake/fake_network.h"
#include "kv_transfer/kv_puller.h"

namespace tandem::fake {

class FakeKvPuller final : public KvPuller {
 public:
  // REQUIRES: network outlives the puller.
  explicit FakeKvPuller(FakeKvNetwork* network) : network_(network) {}

  [[nodiscard]] absl::Status Execute(const TransferMetadata& source,
                                     absl::Span<const TransferCopy> copies,
                                     absl::Span<std::byte> local_pool,
                                     const PullOptions& options) override;
  // Zeroed heap memory.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<KvPoolMemory>> AllocatePool(int64_t bytes) override;
  void Forget(absl::string_view, uint64_t) override {}  // nothing cached

 private:
  FakeKvNetwork* const network_;
};

// A KvPullerFactory making FakeKvPullers on `network`.
KvPullerFactory FakePullerFactory(FakeKvNetwork* network);

}  // namespace tandem::fake
