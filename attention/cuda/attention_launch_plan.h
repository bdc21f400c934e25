// Host-side planning of a CUDA paged-attention launch (pure: std + abseil, no CUDA headers), so
// the decisions the kernels depend on are unit-tested on machines without a GPU.
//
// * Key splitting ("flash decoding"): the key range [0, visible) of every (row, query head) is
//   cut into `num_splits` ranges of `tokens_per_split` local tokens; each range is one thread
//   block writing a partial output and LSE, and the partials are merged exactly by LSE
//   (attention/lse_merge.h). Splitting only happens when there are too few (row, head) items to
//   fill the GPU and the keys are long; the plan depends on shapes only, never on the device, so
//   results are reproducible across GPUs.
// * Row metadata packing: the rows' request/position arrays and block tables (host memory in
//   AttentionRows) are packed into one byte blob, uploaded with one copy, and re-pointed into the
//   device copy.
//
// Thread-safety: free functions, reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/attention_args.h"

namespace tandem::gpu {

// Largest head_dim the CUDA attention kernels support (each lane of a warp holds head_dim / 32
// accumulators in registers).
inline constexpr int32_t kMaxHeadDim = 256;

// A split never covers fewer keys than this (shorter ranges cost more in merge than they gain).
inline constexpr int64_t kMinTokensPerSplit = 256;
// Splitting stops once (row, head) items × splits reaches this many thread blocks (enough to
// fill a 132-SM H200 several times over).
inline constexpr int64_t kTargetBlocks = 2048;
inline constexpr int32_t kMaxSplits = 64;

struct AttentionSplit {
  int32_t num_splits = 1;
  int64_t tokens_per_split = 1;  // local tokens per split; split s covers [s·t, (s+1)·t)
};

// Most local tokens any row of `rows` (host arrays) attends: max over rows with position >= 0 of
// LocalLen(position + 1) on rows.dcp_rank; 0 when every row is padding.
int64_t MaxVisibleTokens(const AttentionRows& rows);

// The split for `items` = rows × query heads whose longest key range is `max_visible` tokens.
// Guarantees num_splits in [1, kMaxSplits], tokens_per_split >= 1 and
// num_splits · tokens_per_split >= max_visible (every key is in exactly one split).
AttentionSplit PlanAttentionSplit(int64_t items, int64_t max_visible);

// Device scratch (floats) the split's partials need: 0 for one split, else
// num_splits · items · (head_dim + 1) (outputs [split][item][head_dim], then LSEs [split][item]).
int64_t AttentionScratchFloats(const AttentionSplit& split, int64_t items, int32_t head_dim);

// Byte offsets of the arrays inside a packed metadata blob (each aligned to 8 bytes).
struct PackedRowsLayout {
  int64_t request = 0;   // int32_t [num_rows]
  int64_t position = 0;  // int64_t [num_rows]
  int64_t offsets = 0;   // int64_t [num_requests + 1]
  int64_t ids = 0;       // int32_t [offsets[num_requests]] (ids before offsets[0] included)
  int64_t bytes = 0;     // total blob size
};

// Packs the host arrays of `rows` into `blob` (resized). REQUIRES: rows passes
// ValidateAttentionCall for its non-padding rows (offsets non-decreasing, arrays readable).
PackedRowsLayout PackAttentionRows(const AttentionRows& rows, std::vector<std::byte>& blob);

// `rows` with its array pointers redirected into a copy of the blob at `blob_base` (device
// memory when the blob was uploaded). Scalars (num_rows, dcp, dcp_rank, num_requests) are kept.
AttentionRows RowsInBlob(const AttentionRows& rows, const PackedRowsLayout& layout,
                         const void* blob_base);

}  // namespace tandem::gpu
