// Work plan of one PagedAttention call (internal to attention/cpu; pure logic, no threads).
//
// Padding rows (negative position) are set aside. The other rows are sorted by (request,
// position) and cut into tiles: consecutive rows of one request
// times a range of the GQA heads of a KV head, at most max_tile_queries queries, so one pass over
// the KV serves the whole tile (decode: one row, all its GQA heads; prefill: several rows).
// Each (tile, KV head) is one unit over the tile's visible local tokens. When there are too few
// units for the threads to share evenly — long sequences, few requests — a unit's range is cut
// into block-aligned chunks of at least min_split_tokens tokens whose partial results the caller
// merges by LSE (lse_merge.h). Units go to threads as contiguous runs of about equal cost.
//
// Thread-safety: PlanAttention is a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/dcp_layout.h"

namespace tandem::attention_cpu {

struct AttentionPlanInput {
  int64_t num_rows = 0;
  const int32_t* request = nullptr;   // [num_rows]
  const int64_t* position = nullptr;  // [num_rows] global positions; < 0: padding row
  DcpGeometry dcp;
  int32_t dcp_rank = 0;
  int32_t num_kv_heads = 1;
  int32_t group_size = 1;  // query heads per KV head
  int32_t head_dim = 1;
  int32_t threads = 1;
  int32_t max_tile_queries = 16;
  int64_t min_split_tokens = 256;  // never split a unit into chunks shorter than this
};

struct PlanTile {
  int32_t request = 0;
  int64_t first = 0;  // index into AttentionPlan::order of the tile's first row
  int32_t num_rows = 0;
  int32_t head_begin = 0;  // the tile's GQA heads within each KV head: [head_begin, +head_count)
  int32_t head_count = 0;
  int64_t tokens = 0;  // local tokens seen by the tile's furthest row
  // Query q of the tile is row order[first + q / head_count], GQA head head_begin + q % head_count.
  int32_t num_queries() const { return num_rows * head_count; }
};

struct PlanUnit {
  int32_t tile = 0;
  int32_t kv_head = 0;
  int64_t token_begin = 0;  // local tokens [token_begin, token_end)
  int64_t token_end = 0;
  int32_t merge = -1;  // index into AttentionPlan::merges when the range is split, else −1
  int32_t chunk = 0;   // which chunk of that split
};

// A split (tile, KV head): its chunks write partials that are merged into the final output.
struct PlanMerge {
  int32_t tile = 0;
  int32_t kv_head = 0;
  int32_t num_chunks = 0;
  int64_t out_offset = 0;  // floats into the partial buffer: [num_chunks][num_queries][head_dim]
  int64_t lse_offset = 0;  // floats into the partial buffer: [num_chunks][num_queries]
};

struct AttentionPlan {
  std::vector<int64_t> order;    // non-padding row indices sorted by (request, position)
  std::vector<int64_t> padding;  // padding rows (position < 0): in no tile, they see no key
  std::vector<int64_t> visible;  // [num_rows] local tokens each row sees: LocalLen(position + 1)
  std::vector<PlanTile> tiles;
  std::vector<PlanUnit> units;
  std::vector<PlanMerge> merges;
  // [threads + 1]: thread t runs units [thread_begin[t], thread_begin[t + 1]).
  std::vector<int64_t> thread_begin;
  int64_t partial_floats = 0;    // size of the partial buffer the merges need
  int32_t max_tile_queries = 0;  // most queries in any tile (sizes kernel scratch)
};

// Relative cost of running `unit` (used for the thread split; exposed for tests).
int64_t UnitCost(const AttentionPlan& plan, const PlanUnit& unit);

// REQUIRES: request/position describe valid rows (the request of a padding row is never read);
// num_kv_heads, group_size, head_dim,
// threads, max_tile_queries, min_split_tokens >= 1; dcp valid.
AttentionPlan PlanAttention(const AttentionPlanInput& in);

}  // namespace tandem::attention_cpu
