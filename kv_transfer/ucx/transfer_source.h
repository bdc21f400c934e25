// UcxTransferSource: the UCX implementation of KvSource (kv_transfer/kv_source.h), the prefill
// side of the KV transfer (docs/design.md#pulling-kv). One per prefill instance.
//
// For every global rank it owns a UCX context, a worker, the rank's KV pool (allocated through
// UCX, see ucx_pool.h) and a progress thread on the worker, and it publishes the instance's
// TransferMetadata (per rank: packed worker address, pool base, pool bytes, packed rkey, memory
// type).
// Readers pull with one-sided gets; the source does nothing per transfer.
//
// Ownership: owns everything above. Destruction joins the progress threads first, then releases
// pools, workers and contexts, in that order. Not copyable or movable.
// Thread-safety: after Create everything is immutable; pool(r) memory is the engine's to
// synchronise (write KV before publishing a KvHandle that lets anyone read it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kv_pool_memory.h"
#include "kv_transfer/kv_source.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

struct UcxTransferSourceOptions : KvSourceOptions {
  UcxOptions ucx;
  // GPU-direct KV (docs/gpu.md#gpu-direct-kv): when set, rank r's pool is device memory from
  // device_pools(r, pool_bytes_per_rank), registered with UCX as CUDA memory and published with
  // memory type kCuda; Create fails FAILED_PRECONDITION when UCX reports no CUDA memory type.
  // Unset: UCX allocates host pools (shared memory), as before.
  KvPoolAllocator device_pools;
};

class UcxTransferSource final : public KvSource {
 public:
  // ValidateKvSourceOptions' errors; UCX failures as ToStatus maps them.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<UcxTransferSource>> Create(
      const UcxTransferSourceOptions& options);
  ~UcxTransferSource() override;
  UcxTransferSource(const UcxTransferSource&) = delete;
  UcxTransferSource& operator=(const UcxTransferSource&) = delete;

  const TransferMetadata& metadata() const override { return metadata_; }
  // REQUIRES: 0 <= rank < world().
  KvPoolMemory& pool(int32_t rank) const override;

 private:
  struct Rank;
  UcxTransferSource();

  TransferMetadata metadata_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace tandem
