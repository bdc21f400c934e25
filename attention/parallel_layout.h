// Placement of one instance's ranks (docs/design.md#parallel-layout): which query and KV heads each
// rank holds and which DCP group / DCP rank it belongs to. Pure; shared by the engines and the
// transfer planner.
//
// Global rank g = c·tp + t (c = PCP index, t = TP index; TP varies fastest).
//   * tp | Hq; query heads of rank t: [t·Hq/tp, (t+1)·Hq/tp).
//   * tp ≤ Hkv: tp | Hkv, KV heads [t·Hkv/tp, (t+1)·Hkv/tp).
//     tp > Hkv: Hkv | tp, replication r = tp/Hkv, KV head t / r (replicas are consecutive).
//   * DCP index x = t·pcp + c; DCP group x / dcp, dcp_rank x mod dcp. Valid iff every group
//     holds identical KV heads. Decode instances have pcp = 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "attention/dcp_layout.h"

namespace tandem {

enum class InstanceRole : uint8_t { kPrefill, kDecode, kCombined };

// Attention shape of the model (what the KV cache layout depends on).
struct ModelDims {
  int32_t num_layers = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  friend bool operator==(const ModelDims&, const ModelDims&) = default;
};

struct ParallelConfig {
  int32_t tp = 1;
  int32_t pcp = 1;
  int32_t dcp = 1;
  int32_t block_size = 16;
  int32_t interleave = 1;

  int32_t world() const { return tp * pcp; }
  DcpGeometry dcp_geometry() const { return DcpGeometry{block_size, dcp, interleave}; }
  std::string ToString() const;  // "tp=2 pcp=1 dcp=2 B=16 I=1"

  friend bool operator==(const ParallelConfig&, const ParallelConfig&) = default;
};

struct RankPlacement {
  int32_t global_rank = 0;
  int32_t tp_rank = 0;   // t
  int32_t pcp_rank = 0;  // c
  int32_t dcp_group = 0;
  int32_t dcp_rank = 0;
  int32_t q_head_begin = 0;
  int32_t q_head_count = 0;
  int32_t kv_head_begin = 0;
  int32_t kv_head_count = 0;
};

// OK, or INVALID_ARGUMENT whose message names the violated rule and the valid values.
absl::Status ValidateParallelConfig(const ParallelConfig& cfg, const ModelDims& dims,
                                    InstanceRole role);

// dcp values that would be valid for this tp/pcp (and role), ascending. Used in error messages.
std::vector<int32_t> ValidDcpValues(const ParallelConfig& cfg, const ModelDims& dims);

// REQUIRES: ValidateParallelConfig(cfg, dims, ·) is OK and 0 <= global_rank < cfg.world().
RankPlacement PlaceRank(const ParallelConfig& cfg, const ModelDims& dims, int32_t global_rank);

// Global ranks of each group, in group-rank order.
std::vector<int32_t> TpGroupRanks(const ParallelConfig& cfg, int32_t pcp_rank);
std::vector<int32_t> PcpGroupRanks(const ParallelConfig& cfg, int32_t tp_rank);
std::vector<int32_t> DcpGroupRanks(const ParallelConfig& cfg, int32_t dcp_group);  // by dcp_rank

}  // namespace tandem
