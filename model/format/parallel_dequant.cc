#include "model/format/parallel_dequant.h"

#include <algorithm>
#include <atomic>

#include "common/parallel_for.h"
#include "model/format/dequant.h"

namespace tandem {

absl::Status DequantizeParallel(GgmlType type, absl::Span<const uint8_t> src,
                                absl::Span<float> dst) {
  const GgmlTypeInfo& info = GgmlTypeTraits(type);
  const int64_t n = static_cast<int64_t>(dst.size());
  // Validate sizes once up front; the chunks below are then consistent by construction.
  const absl::StatusOr<int64_t> bytes = GgmlByteSize(type, n);
  if (!bytes.ok() || *bytes != static_cast<int64_t>(src.size()) || !info.dequantizable) {
    return Dequantize(type, src, dst);
  }
  const int64_t blocks = n / info.block_size;
  // ~64K elements per chunk: big enough to amortise the fork, small enough to balance.
  const int64_t grain = std::max<int64_t>(1, 65536 / info.block_size);
  std::atomic<bool> failed{false};
  ParallelFor(blocks, grain, [&](int64_t begin, int64_t end) {
    const absl::Status s =
        Dequantize(type, src.subspan(begin * info.block_bytes, (end - begin) * info.block_bytes),
                   dst.subspan(begin * info.block_size, (end - begin) * info.block_size));
    if (!s.ok()) failed = true;
  });
  if (failed) return absl::InternalError("dequantisation of a chunk failed after validation");
  return absl::OkStatus();
}

}  // namespace tandem
