// FakeKvSource: a KvSource (kv_transfer/kv_source.h) whose pools are plain heap memory
// registered on a FakeKvNetwork, for node-level tests. Destroying it unregisters every rank: a
// later pull finds the source gone (UNAVAILABLE), as after a prefill process died.
//
// CorruptMetadata() garbles what metadata() publishes, as a peer or the wire could: kinds that
// ValidateTransferMetadata refuses (a truncated rkey, a rank missing) and one it cannot (a pool
// base that is not the registered one), which the fake puller refuses instead.
// Thread-safety: as KvSource; CorruptMetadata must not race metadata() readers.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kv_transfer/fake/fake_network.h"
#include "kv_transfer/kv_source.h"

namespace tandem::fake {

enum class MetadataCorruption { kTruncatedRkey, kMissingRank, kWrongPoolBase };

class FakeKvSource final : public KvSource {
 public:
  // ValidateKvSourceOptions' errors. REQUIRES: network outlives the source.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FakeKvSource>> Create(
      FakeKvNetwork* network, const KvSourceOptions& options);
  ~FakeKvSource() override;
  FakeKvSource(const FakeKvSource&) = delete;
  FakeKvSource& operator=(const FakeKvSource&) = delete;

  const TransferMetadata& metadata() const override { return metadata_; }
  KvPoolMemory& pool(int32_t rank) const override { return *pools_[rank]; }

  void CorruptMetadata(MetadataCorruption kind);

 private:
  explicit FakeKvSource(FakeKvNetwork* network) : network_(network) {}

  FakeKvNetwork* const network_;
  TransferMetadata metadata_;
  std::vector<std::string> addresses_;            // [world], as registered
  std::vector<std::shared_ptr<HeapPool>> pools_;  // [world]
};

// A KvSourceFactory making FakeKvSources on `network`.
KvSourceFactory FakeSourceFactory(FakeKvNetwork* network);

}  // namespace tandem::fake
