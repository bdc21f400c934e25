#include "attention/cuda/attention_launch_plan.h"

#include <algorithm>
#include <cstring>

namespace tandem::gpu {
namespace {

int64_t AlignUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t MaxVisibleTokens(const AttentionRows& rows) {
  int64_t most = 0;
  for (int64_t i = 0; i < rows.num_rows; ++i) {
    const int64_t p = rows.position[i];
    if (p < 0) continue;
    most = std::max(most, LocalLen(rows.dcp, rows.dcp_rank, p + 1));
  }
  return most;
}

AttentionSplit PlanAttentionSplit(int64_t items, int64_t max_visible) {
  AttentionSplit s;
  s.tokens_per_split = std::max<int64_t>(max_visible, 1);
  if (items <= 0 || max_visible <= kMinTokensPerSplit) return s;
  const int64_t by_length = max_visible / kMinTokensPerSplit;  // each split >= the minimum
  const int64_t by_occupancy = CeilDiv(kTargetBlocks, items);
  const int64_t n = std::min<int64_t>({by_length, by_occupancy, kMaxSplits});
  if (n <= 1) return s;
  s.tokens_per_split = CeilDiv(max_visible, n);
  // Rounding tokens_per_split up can leave trailing splits empty: drop them.
  s.num_splits = static_cast<int32_t>(CeilDiv(max_visible, s.tokens_per_split));
  return s;
}

int64_t AttentionScratchFloats(const AttentionSplit& split, int64_t items, int32_t head_dim) {
  if (split.num_splits <= 1) return 0;
  return int64_t{split.num_splits} * items * (int64_t{head_dim} + 1);
}

PackedRowsLayout PackAttentionRows(const AttentionRows& rows, std::vector<std::byte>& blob) {
  const int64_t n = rows.num_rows;
  const int32_t nreq = rows.tables.num_requests;
  const int64_t num_ids = nreq > 0 ? rows.tables.offsets[nreq] : 0;
  PackedRowsLayout l;
  l.request = 0;
  l.position = AlignUp(l.request + n * int64_t{sizeof(int32_t)}, 8);
  l.offsets = AlignUp(l.position + n * int64_t{sizeof(int64_t)}, 8);
  const int64_t num_offsets = nreq > 0 ? nreq + 1 : 0;
  l.ids = AlignUp(l.offsets + num_offsets * int64_t{sizeof(int64_t)}, 8);
  l.bytes = AlignUp(l.ids + num_ids * int64_t{sizeof(int32_t)}, 8);
  blob.assign(l.bytes, std::byte{0});
  auto put = [&](int64_t at, const void* src, int64_t bytes) {
    if (bytes > 0) std::memcpy(blob.data() + at, src, bytes);
  };
  put(l.request, rows.request, n * int64_t{sizeof(int32_t)});
  put(l.position, rows.position, n * int64_t{sizeof(int64_t)});
  put(l.offsets, rows.tables.offsets, num_offsets * int64_t{sizeof(int64_t)});
  put(l.ids, rows.tables.ids, num_ids * int64_t{sizeof(int32_t)});
  return l;
}

AttentionRows RowsInBlob(const AttentionRows& rows, const PackedRowsLayout& layout,
                         const void* blob_base) {
  const auto* base = static_cast<const std::byte*>(blob_base);
  AttentionRows out = rows;
  out.request = reinterpret_cast<const int32_t*>(base + layout.request);
  out.position = reinterpret_cast<const int64_t*>(base + layout.position);
  out.tables.offsets = reinterpret_cast<const int64_t*>(base + layout.offsets);
  out.tables.ids = reinterpret_cast<const int32_t*>(base + layout.ids);
  return out;
}

}  // namespace tandem::gpu
