#include "kv/kv_layout.h"

namespace tandem {

PoolGeometry RankPoolGeometry(const KvLayout& layout, int32_t rank) {
  const RankPlacement p = PlaceRank(layout.parallel, layout.dims, rank);
  return PoolGeometry{p.kv_head_count, layout.dims.num_layers, layout.parallel.block_size,
                      layout.dims.head_dim, layout.dtype};
}

}  // namespace tandem
