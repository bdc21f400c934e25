// Domain types of the KV transfer layer (docs/design.md#handshake). Pure: std + abseil + attention
// core + kv/ (KvLayout lives there, below this layer and proto/convert).
//
// A prefill instance publishes TransferMetadata once per epoch; a decode instance plans copies
// between the two layouts (planner.h) and executes them with one-sided gets (ucx/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_layout.h"  // KvLayout, RankPoolGeometry

namespace tandem {

// One planned copy into a destination rank's pool: `length` bytes from `src_offset` in source
// rank `src_rank`'s pool to `dst_offset` in the destination rank's pool (offsets from pool base).
struct TransferCopy {
  int32_t src_rank = 0;
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t length = 0;

  friend bool operator==(const TransferCopy&, const TransferCopy&) = default;
};

struct TransferPlan {
  // copies[d] = what destination rank d reads, in ascending dst_offset order, adjacent copies
  // merged.
  std::vector<std::vector<TransferCopy>> copies;

  int64_t total_bytes() const;
  int64_t total_copies() const;
};

// Where a pool's bytes live: host memory, or device memory a CUDA-aware transport registered
// (GPU-direct KV, docs/gpu.md#gpu-direct-kv). Only host memory may be read with loads.
enum class KvMemoryType : int32_t { kHost = 0, kCuda = 1 };

// What a destination needs to reach one source rank.
struct RankTransferInfo {
  std::string worker_address;  // packed ucp worker address
  uint64_t pool_base = 0;      // remote virtual address of block 0
  int64_t pool_bytes = 0;      // bytes registered
  std::string rkey;            // packed remote key of the pool
  KvMemoryType memory_type = KvMemoryType::kHost;
};

// Published by a prefill instance; immutable within an epoch.
struct TransferMetadata {
  std::string engine_id;
  uint64_t epoch = 0;
  uint64_t compat_hash = 0;  // CompatibilityHash(model identity, layout)
  KvLayout layout;
  std::vector<RankTransferInfo> ranks;  // indexed by global rank
};

// Protocol version of the KV byte layout; part of the compatibility hash.
inline constexpr uint32_t kKvProtocolVersion = 1;

// Hash of what two instances must agree on to exchange KV: model identity (e.g. file digest),
// layers, head_dim, num_kv_heads, KV dtype and kKvProtocolVersion. Parallel layout (tp, pcp, dcp,
// block size, interleave) is deliberately NOT part of it: the planner remaps between layouts.
uint64_t CompatibilityHash(const std::string& model_identity, const KvLayout& layout);

}  // namespace tandem
