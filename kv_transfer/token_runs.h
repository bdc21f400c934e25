// Token runs: how one destination physical block's slots map onto source physical blocks when the
// two sides place tokens differently (docs/design.md#token-ownership, possibly different block
// size, DCP degree and interleave). Pure index math used by the planner (planner.h).
//
// A run is a maximal range of consecutive slots of one destination block whose tokens sit, in the
// same order, in consecutive slots of one source physical block on one source DCP rank. Inside a
// (head, layer, K|V) row of the pool a run is therefore one contiguous byte range on both sides.
// Units: slots (token offsets inside a block) and virtual block indices, never bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/dcp_layout.h"

namespace tandem {

struct TokenRun {
  int32_t dst_offset = 0;    // first slot inside the destination block, [0, B_dst)
  int32_t src_dcp_rank = 0;  // DCP rank (in any source group) that owns these tokens
  int64_t src_vblock = 0;    // index into the source block table
  int32_t src_offset = 0;    // first slot inside the source block, [0, B_src)
  int32_t length = 0;        // tokens, ≥ 1

  friend bool operator==(const TokenRun&, const TokenRun&) = default;
};

// Replaces *runs with the runs covering slots [0, count) of virtual block `dst_vblock` on
// destination DCP rank `dst_rank`, in ascending dst_offset order. Costs O(number of runs before
// merging), i.e. O(count / min interleave) and O(1) per block when interleave = block size.
// REQUIRES: both geometries valid, 0 <= dst_rank < dst.dcp, 0 <= count <= dst.block_size.
void TokenRunsOfBlock(const DcpGeometry& src, const DcpGeometry& dst, int32_t dst_rank,
                      int64_t dst_vblock, int32_t count, std::vector<TokenRun>* runs);

}  // namespace tandem
