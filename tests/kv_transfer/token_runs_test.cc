// TokenRunsOfBlock and GroupRanksByHeads: hand-worked examples plus a brute-force comparison of
// every slot's mapping over a grid of placements.
#include "kv_transfer/token_runs.h"

#include <vector>

#include "attention/dcp_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv_transfer/head_groups.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;

TokenRun R(int32_t dst_offset, int32_t rank, int64_t vblock, int32_t src_offset, int32_t len) {
  return TokenRun{dst_offset, rank, vblock, src_offset, len};
}

TEST(TokenRunsTest, InterleavedSourceIntoPlainDestination) {
  // Source B=4, dcp2, I=2 (V=8): positions 0,1 → rank 0 slots 0,1; 2,3 → rank 1 slots 0,1;
  // 4,5 → rank 0 slots 2,3; 6,7 → rank 1 slots 2,3. Destination B=8, one rank: slot = position.
  std::vector<TokenRun> runs;
  TokenRunsOfBlock(DcpGeometry{4, 2, 2}, DcpGeometry{8, 1, 1}, 0, 0, 8, &runs);
  EXPECT_THAT(runs,
              ElementsAre(R(0, 0, 0, 0, 2), R(2, 1, 0, 0, 2), R(4, 0, 0, 2, 2), R(6, 1, 0, 2, 2)));
  // Virtual block 1 of the destination is positions 8..15, i.e. source virtual block 1; only
  // the first 3 slots hold tokens.
  TokenRunsOfBlock(DcpGeometry{4, 2, 2}, DcpGeometry{8, 1, 1}, 0, 1, 3, &runs);
  EXPECT_THAT(runs, ElementsAre(R(0, 0, 1, 0, 2), R(2, 1, 1, 0, 1)));
}

TEST(TokenRunsTest, SamePlacementIsOneRunPerBlock) {
  // dcp3, I=2, B=4 on both sides: a rank's block is the same tokens in the same slots.
  std::vector<TokenRun> runs;
  TokenRunsOfBlock(DcpGeometry{4, 3, 2}, DcpGeometry{4, 3, 2}, 2, 5, 4, &runs);
  EXPECT_THAT(runs, ElementsAre(R(0, 2, 5, 0, 4)));
}

TEST(TokenRunsTest, SingleRankIgnoresInterleave) {
  // With dcp = 1 the interleave does not change placement: B=8 I=2 equals B=8 I=8.
  std::vector<TokenRun> runs;
  TokenRunsOfBlock(DcpGeometry{8, 1, 2}, DcpGeometry{8, 1, 8}, 0, 3, 8, &runs);
  EXPECT_THAT(runs, ElementsAre(R(0, 0, 3, 0, 8)));
}

// Runs cover [0, count) in order; every slot maps to exactly the source slot the placements say;
// neighbouring runs could not have been merged.
TEST(TokenRunsTest, MatchesSlotBySlotMappingOverGrid) {
  const std::vector<DcpGeometry> geos = [] {
    std::vector<DcpGeometry> out;
    for (int32_t B : {2, 3, 4, 6, 8}) {
      for (int32_t N : {1, 2, 3, 4}) {
        for (int32_t I = 1; I <= B; ++I) {
          if (B % I == 0) out.push_back(DcpGeometry{B, N, I});
        }
      }
    }
    return out;
  }();
  std::vector<TokenRun> runs;
  for (const DcpGeometry& src : geos) {
    for (const DcpGeometry& dst : geos) {
      for (int32_t r = 0; r < dst.dcp; ++r) {
        for (int64_t vb = 0; vb < 3; ++vb) {
          for (int32_t count : {0, 1, dst.block_size - 1, dst.block_size}) {
            TokenRunsOfBlock(src, dst, r, vb, count, &runs);
            int32_t slot = 0;
            for (size_t i = 0; i < runs.size(); ++i) {
              const TokenRun& run = runs[i];
              ASSERT_EQ(run.dst_offset, slot);
              ASSERT_GE(run.length, 1);
              for (int32_t k = 0; k < run.length; ++k) {
                const int64_t pos = GlobalPosition(dst, r, vb * dst.block_size + slot + k);
                ASSERT_EQ(OwnerRank(src, pos), run.src_dcp_rank);
                ASSERT_EQ(pos / VirtualBlockTokens(src), run.src_vblock);
                ASSERT_EQ(LocalOffset(src, pos), run.src_offset + k);
              }
              if (i > 0) {
                const TokenRun& prev = runs[i - 1];
                ASSERT_FALSE(prev.src_dcp_rank == run.src_dcp_rank &&
                             prev.src_vblock == run.src_vblock &&
                             prev.src_offset + prev.length == run.src_offset);
              }
              slot += run.length;
            }
            ASSERT_EQ(slot, count);
          }
        }
      }
    }
  }
}

TEST(HeadGroupsTest, ReplicasAreWholeDcpGroupsInGroupOrder) {
  // tp8 (4 replicas of each of 2 heads) × pcp2, dcp4: x = t·2 + c, groups of 4 x's.
  const ParallelConfig cfg{8, 2, 4, 16, 1};
  const std::vector<HeadGroup> groups = GroupRanksByHeads(cfg, ModelDims{2, 8, 2, 16});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].head_begin, 0);
  EXPECT_EQ(groups[0].head_count, 1);
  EXPECT_EQ(groups[0].first_dcp_group, 0);
  EXPECT_THAT(groups[0].replicas, ElementsAre(ElementsAre(0, 8, 1, 9), ElementsAre(2, 10, 3, 11)));
  EXPECT_EQ(groups[1].head_begin, 1);
  EXPECT_EQ(groups[1].first_dcp_group, 2);
  EXPECT_THAT(groups[1].replicas,
              ElementsAre(ElementsAre(4, 12, 5, 13), ElementsAre(6, 14, 7, 15)));
}

TEST(HeadGroupsTest, HeadRangesWithoutReplication) {
  // tp2 over 4 heads, pcp3, dcp3: each head range is held by one DCP group of the 3 PCP ranks.
  const std::vector<HeadGroup> groups =
      GroupRanksByHeads(ParallelConfig{2, 3, 3, 16, 1}, ModelDims{2, 8, 4, 16});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].head_begin, 2);
  EXPECT_EQ(groups[1].head_count, 2);
  EXPECT_THAT(groups[0].replicas, ElementsAre(ElementsAre(0, 2, 4)));
  EXPECT_THAT(groups[1].replicas, ElementsAre(ElementsAre(1, 3, 5)));
}

}  // namespace
}  // namespace tandem
