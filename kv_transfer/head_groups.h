// The ranks of one instance grouped by the KV head range they hold (docs/design.md#dcp-groups). All
// ranks that hold a given KV head hold the same head range, and they form whole DCP groups
// ("replicas"), each of which stores every token once. The planner reads a head from one replica.
// Pure; built from PlaceRank / DcpGroupRanks so it cannot drift from the engines' placement.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/parallel_layout.h"

namespace tandem {

struct HeadGroup {
  int32_t head_begin = 0;
  int32_t head_count = 0;
  int32_t first_dcp_group = 0;                 // replica j is DCP group first_dcp_group + j
  std::vector<std::vector<int32_t>> replicas;  // [replica][dcp_rank] -> global rank

  bool contains(int32_t head) const { return head >= head_begin && head < head_begin + head_count; }
};

// Head groups ascending by head_begin; together they cover heads [0, num_kv_heads) once, and all
// have the same number of replicas.
// REQUIRES: ValidateParallelConfig(cfg, dims, ·) is OK.
std::vector<HeadGroup> GroupRanksByHeads(const ParallelConfig& cfg, const ModelDims& dims);

}  // namespace tandem
