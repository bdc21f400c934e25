// WriteKvCache: scatter of new K/V rows into the pool, converting to the pool dtype.
#include <algorithm>
#include <cstddef>

#include "attention/cpu/attention_kernel.h"
#include "attention/cpu/cpu_isa.h"
#include "attention/cpu/paged_attention.h"
#include "common/parallel_for.h"

namespace tandem {

void WriteKvCache(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t num_rows,
                  const float* k, const float* v) {
  const PoolGeometry& g = pool.geometry;
  const attention_cpu::KernelTable& kernels =
      attention_cpu::SelectKernels(ActiveCpuIsa(), g.head_dim);
  const int64_t row_floats = int64_t{g.num_kv_heads} * g.head_dim;
  auto* base = static_cast<std::byte*>(pool.base);
  // A decode step writes a handful of rows: keep those on the calling thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (2 * row_floats));
  ParallelFor(num_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (slots[i] < 0) continue;
      for (int32_t h = 0; h < g.num_kv_heads; ++h) {
        const int64_t src = i * row_floats + int64_t{h} * g.head_dim;
        const int64_t k_at = KvSlotElementIndex(g, slots[i], h, layer, 0) * g.elem_bytes();
        const int64_t v_at = KvSlotElementIndex(g, slots[i], h, layer, 1) * g.elem_bytes();
        kernels.store_row(k + src, base + k_at, g.head_dim, g.dtype);
        kernels.store_row(v + src, base + v_at, g.head_dim, g.dtype);
      }
    }
  });
}

}  // namespace tandem
