// UcxPool: a KV pool allocated by UCX itself (ucp_mem_map with UCP_MEM_MAP_ALLOCATE), or —
// GPU-direct KV (docs/gpu.md#gpu-direct-kv) — memory allocated elsewhere (a device pool) and
// registered with ucp_mem_map under its memory type.
//
// Why allocate through UCX instead of registering our own memory: with Debian's UCX 1.13.1 a
// get from memory the owner merely *registered* is emulated over active messages and completes
// only while the owner progresses its worker; memory UCX *allocated* (shared memory on one host)
// is mapped by the reader and read with plain loads — truly one-sided (docs/kv_transfer.md).
//
// Ownership: owns the mapping (ucp_mem_unmap on destruction) and keeps its context alive; a
// registered pool also owns the memory it registered, released after the unmap. The packed rkey
// is copied out at creation and the UCX buffer released at once. Not copyable or movable.
// Thread-safety: immutable after Create/Register; accessors safe from any thread.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/kv_pool_memory.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

class UcxPool final : public KvPoolMemory {
 public:
  // REQUIRES: bytes > 0 (else INVALID_ARGUMENT). Contents are unspecified (UCX usually hands
  // out fresh, zeroed shared memory; do not rely on it).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<UcxPool>> Create(
      std::shared_ptr<UcxContext> context, int64_t bytes);
  // Registers `memory` (its base() and bytes() > 0, else INVALID_ARGUMENT) as `type`, telling
  // UCX the memory type rather than letting it detect it. kCuda needs a context whose UCX
  // reports CUDA memory (FAILED_PRECONDITION naming the memory types it has otherwise).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<UcxPool>> Register(
      std::shared_ptr<UcxContext> context, std::unique_ptr<KvPoolMemory> memory, KvMemoryType type);
  ~UcxPool() override;
  UcxPool(const UcxPool&) = delete;
  UcxPool& operator=(const UcxPool&) = delete;

  void* base() const override { return base_; }
  int64_t bytes() const override { return bytes_; }

  // Packed remote key a peer unpacks (ucp_ep_rkey_unpack) to read this pool.
  const std::string& packed_rkey() const { return packed_rkey_; }
  KvMemoryType memory_type() const { return memory_type_; }

 private:
  UcxPool(std::shared_ptr<UcxContext> context, ucp_mem_h memh, void* base, int64_t bytes,
          std::string packed_rkey, KvMemoryType memory_type,
          std::unique_ptr<KvPoolMemory> registered)
      : registered_(std::move(registered)),
        context_(std::move(context)),
        memh_(memh),
        base_(base),
        bytes_(bytes),
        packed_rkey_(std::move(packed_rkey)),
        memory_type_(memory_type) {}
  // Maps (allocating when params.address is null), packs the rkey, builds the pool.
  static absl::StatusOr<std::unique_ptr<UcxPool>> Map(std::shared_ptr<UcxContext> context,
                                                      const ucp_mem_map_params_t& params,
                                                      int64_t bytes, KvMemoryType type,
                                                      std::unique_ptr<KvPoolMemory> registered);

  std::unique_ptr<KvPoolMemory> registered_;  // declared first: freed after the unmap
  std::shared_ptr<UcxContext> context_;
  ucp_mem_h memh_;
  void* base_;
  int64_t bytes_;
  std::string packed_rkey_;
  KvMemoryType memory_type_;
};

}  // namespace tandem
