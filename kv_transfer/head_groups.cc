#include "kv_transfer/head_groups.h"

namespace tandem {

std::vector<HeadGroup> GroupRanksByHeads(const ParallelConfig& cfg, const ModelDims& dims) {
  std::vector<HeadGroup> groups;
  // DCP groups are numbered along x = t·pcp + c and heads grow with t, so the groups holding one
  // head range are consecutive and appear in ascending head order.
  for (int32_t g = 0; g < cfg.world() / cfg.dcp; ++g) {
    std::vector<int32_t> ranks = DcpGroupRanks(cfg, g);
    const RankPlacement p = PlaceRank(cfg, dims, ranks.front());
    if (groups.empty() || groups.back().head_begin != p.kv_head_begin) {
      groups.push_back(HeadGroup{p.kv_head_begin, p.kv_head_count, g, {}});
    }
    groups.back().replicas.push_back(std::move(ranks));
  }
  return groups;
}

}  // namespace tandem
