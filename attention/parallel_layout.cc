#include "attention/parallel_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem {
namespace {

// Ranks (tp * pcp) one instance may have: far beyond any deployment, small enough that world()
// cannot overflow and that validating a layout (which walks the ranks) stays cheap for a garbled
// one received from a peer.
constexpr int32_t kMaxWorldSize = 1 << 16;

std::vector<int32_t> Divisors(int32_t n) {
  std::vector<int32_t> out;
  for (int32_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

std::string List(const std::vector<int32_t>& v) {
  return absl::StrCat("{", absl::StrJoin(v, ", "), "}");
}

// KV heads [begin, begin+count) of TP rank t. REQUIRES head rules hold.
void KvHeadsOf(const ParallelConfig& cfg, const ModelDims& dims, int32_t t, int32_t* begin,
               int32_t* count) {
  if (cfg.tp <= dims.num_kv_heads) {
    *count = dims.num_kv_heads / cfg.tp;
    *begin = t * *count;
  } else {
    *count = 1;
    *begin = t / (cfg.tp / dims.num_kv_heads);
  }
}

// Checks the DCP grouping rule only (head rules already hold).
bool DcpGroupsHoldSameHeads(const ParallelConfig& cfg, const ModelDims& dims) {
  const int32_t world = cfg.world();
  if (cfg.dcp < 1 || world % cfg.dcp != 0) return false;
  for (int32_t group = 0; group < world / cfg.dcp; ++group) {
    int32_t first_begin = -1;
    for (int32_t x = group * cfg.dcp; x < (group + 1) * cfg.dcp; ++x) {
      const int32_t t = x / cfg.pcp;
      int32_t begin, count;
      KvHeadsOf(cfg, dims, t, &begin, &count);
      if (first_begin < 0) first_begin = begin;
      if (begin != first_begin) return false;
    }
  }
  return true;
}

}  // namespace

std::string ParallelConfig::ToString() const {
  return absl::StrCat("tp=", tp, " pcp=", pcp, " dcp=", dcp, " B=", block_size, " I=", interleave);
}

std::vector<int32_t> ValidDcpValues(const ParallelConfig& cfg, const ModelDims& dims) {
  std::vector<int32_t> out;
  for (int32_t d : Divisors(cfg.world())) {
    ParallelConfig c = cfg;
    c.dcp = d;
    if (DcpGroupsHoldSameHeads(c, dims)) out.push_back(d);
  }
  return out;
}

absl::Status ValidateParallelConfig(const ParallelConfig& cfg, const ModelDims& dims,
                                    InstanceRole role) {
  if (dims.num_layers < 1 || dims.num_q_heads < 1 || dims.num_kv_heads < 1 || dims.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model dimensions must be positive (layers=", dims.num_layers, ", q_heads=",
        dims.num_q_heads, ", kv_heads=", dims.num_kv_heads, ", head_dim=", dims.head_dim, ")"));
  }
  if (dims.num_q_heads % dims.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_kv_heads (", dims.num_kv_heads, ") must divide num_q_heads (", dims.num_q_heads, ")"));
  }
  if (cfg.tp < 1)
    return absl::InvalidArgumentError(absl::StrCat("tp must be >= 1 (got ", cfg.tp, ")"));
  if (cfg.pcp < 1)
    return absl::InvalidArgumentError(absl::StrCat("pcp must be >= 1 (got ", cfg.pcp, ")"));
  if (cfg.dcp < 1)
    return absl::InvalidArgumentError(absl::StrCat("dcp must be >= 1 (got ", cfg.dcp, ")"));
  if (int64_t{cfg.tp} * cfg.pcp > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("tp*pcp must be at most ", kMaxWorldSize,
                                                   " ranks (tp=", cfg.tp, ", pcp=", cfg.pcp, ")"));
  }
  if (role == InstanceRole::kDecode && cfg.pcp != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pcp must be 1 on a decode instance (got pcp=", cfg.pcp,
        "): prefill context parallelism only applies to prefill; use dcp to shard decode KV"));
  }
  if (dims.num_q_heads % cfg.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp must divide the number of query heads (tp=", cfg.tp, ", num_q_heads=", dims.num_q_heads,
        "); valid tp: ", List(Divisors(dims.num_q_heads))));
  }
  if (cfg.tp <= dims.num_kv_heads && dims.num_kv_heads % cfg.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp <= num_kv_heads requires tp to divide num_kv_heads (tp=", cfg.tp, ", num_kv_heads=",
        dims.num_kv_heads, "); valid tp up to num_kv_heads: ", List(Divisors(dims.num_kv_heads))));
  }
  if (cfg.tp > dims.num_kv_heads && cfg.tp % dims.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tp > num_kv_heads requires num_kv_heads to divide tp so every KV head is replicated "
        "equally (tp=",
        cfg.tp, ", num_kv_heads=", dims.num_kv_heads, "); valid tp are multiples of ",
        dims.num_kv_heads, " that divide num_q_heads=", dims.num_q_heads));
  }
  if (cfg.world() % cfg.dcp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dcp must divide tp*pcp (dcp=", cfg.dcp, ", tp*pcp=", cfg.world(),
                     "); valid dcp for this layout: ", List(ValidDcpValues(cfg, dims))));
  }
  if (!DcpGroupsHoldSameHeads(cfg, dims)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "every DCP group must hold the same KV heads, but dcp=", cfg.dcp, " with tp=", cfg.tp,
        ", pcp=", cfg.pcp, ", num_kv_heads=", dims.num_kv_heads,
        " would mix KV heads in one group (groups span PCP ranks first, then TP replicas; "
        "with pcp=1 dcp must divide tp/num_kv_heads); valid dcp for this layout: ",
        List(ValidDcpValues(cfg, dims))));
  }
  return ValidateDcpGeometry(cfg.dcp_geometry());
}

RankPlacement PlaceRank(const ParallelConfig& cfg, const ModelDims& dims, int32_t global_rank) {
  RankPlacement p;
  p.global_rank = global_rank;
  p.tp_rank = global_rank % cfg.tp;
  p.pcp_rank = global_rank / cfg.tp;
  const int32_t x = p.tp_rank * cfg.pcp + p.pcp_rank;
  p.dcp_group = x / cfg.dcp;
  p.dcp_rank = x % cfg.dcp;
  p.q_head_count = dims.num_q_heads / cfg.tp;
  p.q_head_begin = p.tp_rank * p.q_head_count;
  KvHeadsOf(cfg, dims, p.tp_rank, &p.kv_head_begin, &p.kv_head_count);
  return p;
}

std::vector<int32_t> TpGroupRanks(const ParallelConfig& cfg, int32_t pcp_rank) {
  std::vector<int32_t> out;
  for (int32_t t = 0; t < cfg.tp; ++t) out.push_back(pcp_rank * cfg.tp + t);
  return out;
}

std::vector<int32_t> PcpGroupRanks(const ParallelConfig& cfg, int32_t tp_rank) {
  std::vector<int32_t> out;
  for (int32_t c = 0; c < cfg.pcp; ++c) out.push_back(c * cfg.tp + tp_rank);
  return out;
}

std::vector<int32_t> DcpGroupRanks(const ParallelConfig& cfg, int32_t dcp_group) {
  std::vector<int32_t> out;
  for (int32_t x = dcp_group * cfg.dcp; x < (dcp_group + 1) * cfg.dcp; ++x) {
    const int32_t t = x / cfg.pcp;
    const int32_t c = x % cfg.pcp;
    out.push_back(c * cfg.tp + t);
  }
  return out;
}

}  // namespace tandem
