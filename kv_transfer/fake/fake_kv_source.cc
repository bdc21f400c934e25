#include "kv_transfer/fake/fake_kv_source.h"

#include <utility>

#include "common/status_macros.h"

namespace tandem::fake {

absl::StatusOr<std::unique_ptr<FakeKvSource>> FakeKvSource::Create(FakeKvNetwork* network,
                                                                   const KvSourceOptions& options) {
  TANDEM_RETURN_IF_ERROR(ValidateKvSourceOptions(options));
  std::unique_ptr<FakeKvSource> self(new FakeKvSource(network));
  self->metadata_.engine_id = options.engine_id;
  self->metadata_.epoch = options.epoch;
  self->metadata_.compat_hash = options.compat_hash;
  self->metadata_.layout = options.layout;
  for (int32_t r = 0; r < options.layout.world(); ++r) {
    auto pool = std::make_shared<HeapPool>(options.pool_bytes_per_rank);
    RankTransferInfo info;
    info.worker_address = FakeWorkerAddress(options.engine_id, options.epoch, r);
    info.pool_base = reinterpret_cast<uint64_t>(pool->base());
    info.pool_bytes = pool->bytes();
    // A UCX 1.13 rkey with an empty memory-domain map (ValidatePackedRkeyShape accepts it), the
    // address trailing so every rank's key differs.
    info.rkey = std::string(9, '\0') + info.worker_address;
    network->Register(info.worker_address, FakeKvNetwork::Endpoint{info, pool});
    self->addresses_.push_back(info.worker_address);
    self->metadata_.ranks.push_back(std::move(info));
    self->pools_.push_back(std::move(pool));
  }
  return self;
}

FakeKvSource::~FakeKvSource() {
  for (const std::string& address : addresses_) network_->Unregister(address);
}

void FakeKvSource::CorruptMetadata(MetadataCorruption kind) {
  switch (kind) {
    case MetadataCorruption::kTruncatedRkey:
      // The md map claims one memory domain whose entry is missing.
      metadata_.ranks[0].rkey = std::string("\x01\0\0\0\0\0\0\0\0", 9);
      break;
    case MetadataCorruption::kMissingRank:
      metadata_.ranks.pop_back();
      break;
    case MetadataCorruption::kWrongPoolBase:
      metadata_.ranks[0].pool_base += 64;
      break;
  }
}

KvSourceFactory FakeSourceFactory(FakeKvNetwork* network) {
  return [network](const KvSourceOptions& options) -> absl::StatusOr<std::unique_ptr<KvSource>> {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<FakeKvSource> source,
                            FakeKvSource::Create(network, options));
    return std::unique_ptr<KvSource>(std::move(source));
  };
}

}  // namespace tandem::fake
