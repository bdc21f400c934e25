// KvLayout: everything about one instance that determines where its KV bytes live (parallel
// layout, attention shape, KV dtype; docs/design.md#parallel-layout), and the pool geometry it
// gives each rank. A plain value, compared field by field; the wire form and its checks are
// proto/convert/kv_layout_proto.h, the transfer layer's use of it kv_transfer/transfer_types.h.
//
// Pure (std + attention core). Thread-safety: a value type.
#pragma once

#include <cstdint>

#include "attention/kv_dtype.h"
#include "attention/parallel_layout.h"
#include "attention/pool_layout.h"

namespace tandem {

struct KvLayout {
  ParallelConfig parallel;
  ModelDims dims;
  KvDType dtype = KvDType::kF32;

  int32_t world() const { return parallel.world(); }

  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

// Pool geometry of global rank `rank` of an instance with this layout.
// REQUIRES: ValidateParallelConfig(layout.parallel, layout.dims, ·) is OK.
PoolGeometry RankPoolGeometry(const KvLayout& layout, int32_t rank);

}  // namespace tandem
