// Property test of PlanKvTransfer over deterministic samples of layout grids; each pair is
// executed by the simulator (plan_simulator.h), which checks every byte.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "attention/parallel_layout.h"
#include "gtest/gtest.h"
#include "tests/kv_transfer/plan_simulator.h"

namespace tandem::testing {
namespace {

struct Grid {
  std::vector<int32_t> tps;
  std::vector<int32_t> src_pcps;  // destinations are decode layouts: pcp = 1
  std::vector<int32_t> block_sizes;
  std::vector<int32_t> hkvs;
  int32_t q_per_kv;  // Hq = q_per_kv · Hkv, chosen so that every tp of the grid divides Hq
};

ModelDims Dims(const Grid& grid, int32_t hkv, bool narrow) {
  // 16-bit dtypes get narrow dims so that element codes stay unique.
  return ModelDims{narrow ? 1 : 2, grid.q_per_kv * hkv, hkv, narrow ? 2 : 3};
}

// Every valid layout of the grid for `hkv` KV heads (every interleave dividing B, every dcp).
std::vector<ParallelConfig> Layouts(const Grid& grid, int32_t hkv,
                                    const std::vector<int32_t>& pcps) {
  std::vector<ParallelConfig> out;
  const ModelDims dims = Dims(grid, hkv, false);
  for (int32_t tp : grid.tps) {
    for (int32_t pcp : pcps) {
      for (int32_t B : grid.block_sizes) {
        for (int32_t I = 1; I <= B; ++I) {
          for (int32_t dcp = 1; dcp <= tp * pcp && B % I == 0; ++dcp) {
            const ParallelConfig c{tp, pcp, dcp, B, I};
            if (ValidateParallelConfig(c, dims, InstanceRole::kPrefill).ok()) out.push_back(c);
          }
        }
      }
    }
  }
  return out;
}

struct Coverage {
  std::set<int32_t> src_tp, src_pcp, src_dcp, src_b, src_i, dst_tp, dst_dcp, dst_b, dst_i, hkv;
  std::set<int> token_kinds;
  std::set<KvDType> dtypes;
  int identical = 0, block_granular = 0;
};

// Runs `pairs` sampled pairs; categories rotate: any pair, identical layouts, I = B on both
// sides, I = B with equal B. Token counts rotate over 0, 1, B−1, B·dcp+1 and random (B and dcp
// of the source or the destination). Every seventh pair uses f16/bf16 where codes fit.
Coverage RunGrid(const Grid& grid, int pairs, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<ParallelConfig>> srcs, dsts;
  for (int32_t hkv : grid.hkvs) {
    srcs.push_back(Layouts(grid, hkv, grid.src_pcps));
    dsts.push_back(Layouts(grid, hkv, {1}));
  }
  auto pick = [&](const std::vector<ParallelConfig>& v, bool block_granular) {
    for (;;) {
      const ParallelConfig& c = v[rng.Below(static_cast<int64_t>(v.size()))];
      if (!block_granular || c.interleave == c.block_size) return c;
    }
  };
  Coverage cov;
  const int num_hkv = static_cast<int>(grid.hkvs.size());
  for (int i = 0; i < pairs; ++i) {
    const int hi = i % num_hkv;
    const int32_t hkv = grid.hkvs[hi];
    const int category = (i / num_hkv) % 4;
    const ParallelConfig sp = pick(category == 1 ? dsts[hi] : srcs[hi], category >= 2);
    ParallelConfig dp = category == 1 ? sp : pick(dsts[hi], category >= 2);
    if (category == 3) dp.block_size = dp.interleave = sp.block_size;

    PairCase c;
    const int kind = (i / 16) % 5;
    const ParallelConfig& side = (i / 80) % 2 == 0 ? sp : dp;
    const int64_t max_v = std::max(sp.block_size * sp.dcp, dp.block_size * dp.dcp);
    const bool want_narrow = i % 7 == 3;
    switch (kind) {
      case 0:
        c.num_tokens = 0;
        break;
      case 1:
        c.num_tokens = 1;
        break;
      case 2:
        c.num_tokens = side.block_size - 1;
        break;
      case 3:
        c.num_tokens = int64_t{side.block_size} * side.dcp + 1;
        break;
      default:
        c.num_tokens = 2 + rng.Below(want_narrow ? 120 : 2 * max_v + 40);
        break;
    }
    const KvDType narrow_type = i % 2 == 0 ? KvDType::kF16 : KvDType::kBF16;
    c.src = KvLayout{sp, Dims(grid, hkv, true), narrow_type};
    const bool narrow = want_narrow && CodesFit(c);
    c.src = KvLayout{sp, Dims(grid, hkv, narrow), narrow ? narrow_type : KvDType::kF32};
    c.dst = KvLayout{dp, c.src.dims, c.src.dtype};
    c.table_mode = static_cast<int>(rng.Below(3));
    c.seed = rng.Next();
    const std::string err = SimulatePlan(c);
    EXPECT_EQ(err, "") << "pair " << i << ": " << c.Describe();
    if (!err.empty()) break;

    cov.src_tp.insert(sp.tp);
    cov.src_pcp.insert(sp.pcp);
    cov.src_dcp.insert(sp.dcp);
    cov.src_b.insert(sp.block_size);
    cov.src_i.insert(sp.interleave);
    cov.dst_tp.insert(dp.tp);
    cov.dst_dcp.insert(dp.dcp);
    cov.dst_b.insert(dp.block_size);
    cov.dst_i.insert(dp.interleave);
    cov.hkv.insert(hkv);
    cov.token_kinds.insert(kind);
    cov.dtypes.insert(c.src.dtype);
    cov.identical += sp.tp == dp.tp && sp.pcp == dp.pcp && sp.dcp == dp.dcp &&
                     sp.block_size == dp.block_size && sp.interleave == dp.interleave;
    cov.block_granular += sp.interleave == sp.block_size && dp.interleave == dp.block_size;
  }
  return cov;
}

std::set<int32_t> Set(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

// Every value listed in the grid appears on both sides, with every dcp that is valid somewhere.
void ExpectCovered(const Grid& grid, const Coverage& cov, int pairs) {
  std::set<int32_t> src_dcp, dst_dcp, interleaves;
  for (int32_t hkv : grid.hkvs) {
    for (const auto& l : Layouts(grid, hkv, grid.src_pcps)) src_dcp.insert(l.dcp);
    for (const auto& l : Layouts(grid, hkv, {1})) dst_dcp.insert(l.dcp);
  }
  for (int32_t B : grid.block_sizes) {
    for (int32_t I = 1; I <= B; ++I) {
      if (B % I == 0) interleaves.insert(I);
    }
  }
  EXPECT_EQ(cov.src_tp, Set(grid.tps));
  EXPECT_EQ(cov.dst_tp, Set(grid.tps));
  EXPECT_EQ(cov.src_pcp, Set(grid.src_pcps));
  EXPECT_EQ(cov.src_dcp, src_dcp);
  EXPECT_EQ(cov.dst_dcp, dst_dcp);
  EXPECT_EQ(cov.src_b, Set(grid.block_sizes));
  EXPECT_EQ(cov.dst_b, Set(grid.block_sizes));
  EXPECT_EQ(cov.src_i, interleaves);
  EXPECT_EQ(cov.dst_i, interleaves);
  EXPECT_EQ(cov.hkv, Set(grid.hkvs));
  EXPECT_EQ(cov.token_kinds.size(), 5u);
  EXPECT_EQ(cov.dtypes.size(), 3u);
  EXPECT_GE(cov.identical, pairs / 8);
  EXPECT_GE(cov.block_granular, pairs / 3);
}

// The grid of the design: tp ∈ {1,2,4,8}, pcp ∈ {1,2}, B ∈ {4,8,16}, Hkv ∈ {1,2,4,8}.
TEST(PlannerPropertyTest, PowerOfTwoGrid) {
  const Grid grid{{1, 2, 4, 8}, {1, 2}, {4, 8, 16}, {1, 2, 4, 8}, 8};
  constexpr int kPairs = 2400;
  const Coverage cov = RunGrid(grid, kPairs, 0x7a9de11);
  ExpectCovered(grid, cov, kPairs);
}

// Degrees and block sizes that do not divide each other (DCP 2→3, 3→2, B 4↔6, I = 3), where
// chunk boundaries of the two placements do not nest.
TEST(PlannerPropertyTest, NonDivisibleGrid) {
  const Grid grid{{1, 2, 3, 6}, {1, 2, 3}, {3, 4, 6, 12}, {1, 2, 3, 6}, 6};
  constexpr int kPairs = 1600;
  const Coverage cov = RunGrid(grid, kPairs, 0x5eed2);
  ExpectCovered(grid, cov, kPairs);
  EXPECT_TRUE(cov.src_dcp.count(3) && cov.dst_dcp.count(2) && cov.src_dcp.count(2) &&
              cov.dst_dcp.count(3));
}

}  // namespace
}  // namespace tandem::testing
