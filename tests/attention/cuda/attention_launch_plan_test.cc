// The host-side planning of CUDA attention launches (pure; runs without a GPU): key splits cover
// every key exactly once within the stated limits, and packed row metadata round-trips.
#include "attention/cuda/attention_launch_plan.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::gpu {
namespace {

TEST(AttentionLaunchPlanTest, MaxVisibleTokensFollowsDcpOwnershipAndSkipsPadding) {
  // docs/design.md#token-ownership worked example: LocalLen(10) over N=4, I=1 is [3, 3, 2, 2].
  const std::vector<int32_t> request = {0, 0, 0};
  const std::vector<int64_t> position = {9, -1, 2};
  const std::vector<int64_t> want = {3, 3, 2, 2};
  for (int32_t rank = 0; rank < 4; ++rank) {
    const AttentionRows rows{
        3, request.data(), position.data(), BlockTablesView{}, DcpGeometry{16, 4, 1}, rank};
    EXPECT_EQ(MaxVisibleTokens(rows), want[rank]) << "rank " << rank;
  }
  const std::vector<int64_t> padding = {-1, -5};
  const AttentionRows all_padding{
      2, request.data(), padding.data(), BlockTablesView{}, DcpGeometry{16, 1, 1}, 0};
  EXPECT_EQ(MaxVisibleTokens(all_padding), 0);
}

TEST(AttentionLaunchPlanTest, SplitsCoverEveryKeyOnceWithinLimits) {
  for (int64_t items : {0, 1, 3, 16, 100, 1000, 2047, 2048, 5000}) {
    for (int64_t visible : {0, 1, 255, 256, 257, 511, 512, 513, 1000, 4001, 100000, 10000000}) {
      SCOPED_TRACE("items=" + std::to_string(items) + " visible=" + std::to_string(visible));
      const AttentionSplit s = PlanAttentionSplit(items, visible);
      ASSERT_GE(s.num_splits, 1);
      ASSERT_LE(s.num_splits, kMaxSplits);
      ASSERT_GE(s.tokens_per_split, 1);
      EXPECT_GE(s.num_splits * s.tokens_per_split, visible) << "a key is in no split";
      if (s.num_splits > 1) {
        EXPECT_LT((s.num_splits - 1) * s.tokens_per_split, visible) << "an empty trailing split";
        EXPECT_GE(s.tokens_per_split, kMinTokensPerSplit);
        EXPECT_LT(items * (s.num_splits - 1), kTargetBlocks) << "split although the GPU is full";
      }
      if (visible <= kMinTokensPerSplit || items >= kTargetBlocks) {
        EXPECT_EQ(s.num_splits, 1);
      }
    }
  }
  // A long decode row of one head: split as far as the minimum split length allows.
  const AttentionSplit one = PlanAttentionSplit(4, 4001);
  EXPECT_EQ(one.num_splits, 15);
  EXPECT_EQ(one.tokens_per_split, 267);
}

TEST(AttentionLaunchPlanTest, ScratchHoldsEveryPartialAndLse) {
  EXPECT_EQ(AttentionScratchFloats(AttentionSplit{1, 4000}, 100, 128), 0);
  EXPECT_EQ(AttentionScratchFloats(AttentionSplit{3, 300}, 10, 64), 3 * 10 * 65);
}

TEST(AttentionLaunchPlanTest, PackedRowsRoundTripAligned) {
  const std::vector<int32_t> request = {1, 0, 1};
  const std::vector<int64_t> position = {17, -1, 3};
  // CSR offsets need not start at 0: the ids before offsets[0] travel too.
  const std::vector<int32_t> ids = {99, 7, 8, 9, 4, 5};
  const std::vector<int64_t> offsets = {1, 4, 6};
  const AttentionRows rows{3,
                           request.data(),
                           position.data(),
                           BlockTablesView{ids.data(), offsets.data(), 2},
                           DcpGeometry{8, 2, 2},
                           1};
  std::vector<std::byte> blob;
  const PackedRowsLayout layout = PackAttentionRows(rows, blob);
  ASSERT_EQ(static_cast<int64_t>(blob.size()), layout.bytes);
  for (int64_t at : {layout.request, layout.position, layout.offsets, layout.ids, layout.bytes}) {
    EXPECT_EQ(at % 8, 0);
  }
  const AttentionRows back = RowsInBlob(rows, layout, blob.data());
  EXPECT_EQ(back.num_rows, 3);
  EXPECT_EQ(back.dcp_rank, 1);
  EXPECT_EQ(back.dcp.interleave, 2);
  EXPECT_EQ(back.tables.num_requests, 2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(back.request[i], request[i]);
    EXPECT_EQ(back.position[i], position[i]);
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(back.tables.num_blocks(r), rows.tables.num_blocks(r));
    for (int64_t e = 0; e < back.tables.num_blocks(r); ++e) {
      EXPECT_EQ(back.tables.table(r)[e], rows.tables.table(r)[e]);
    }
  }
  // No requests (every row padding): nothing of the tables is read or packed.
  const AttentionRows padding{
      1, request.data(), position.data() + 1, BlockTablesView{}, DcpGeometry{8, 1, 1}, 0};
  const PackedRowsLayout small = PackAttentionRows(padding, blob);
  EXPECT_EQ(small.bytes, 16);
}

}  // namespace
}  // namespace tandem::gpu
