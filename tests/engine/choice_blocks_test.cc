// engine/choice_blocks.h: n choices of one prompt share its full blocks by reference count, each
// further choice owns a copy of the partial last block, and releasing every table (the choices
// ending, cancelled or failed, in any order) returns the pool to its free count.
#include "engine/choice_blocks.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(ChoiceBlocksTest, NeededCountsSharedPromptBlocksOnce) {
  // 1000-token prompt, 16-token blocks, budget 16: 64 blocks a choice, 62 of them full prompt.
  EXPECT_EQ(ChoiceBlocksNeeded(64, 1000, 16, 1), 64);
  EXPECT_EQ(ChoiceBlocksNeeded(64, 1000, 16, 4), 64 + 3 * 2);
  // A prompt on a block boundary: every prompt block is full.
  EXPECT_EQ(ChoiceBlocksNeeded(5, 64, 16, 3), 5 + 2 * 1);
  // A prompt shorter than one block shares nothing.
  EXPECT_EQ(ChoiceBlocksNeeded(2, 10, 16, 3), 6);
  EXPECT_EQ(ChoiceBlocksNeeded(2, 10, 16, 0), 2);  // n < 1 counts as one
}

TEST(ChoiceBlocksTest, SharesFullBlocksAndCopiesThePartialOne) {
  BlockManager bm(32);
  const int32_t start = bm.free_blocks();
  // Prompt of 40 tokens, 16-token blocks: blocks 0-1 full, block 2 partial; 4 blocks a choice.
  const int64_t needed = ChoiceBlocksNeeded(4, 40, 16, 3);
  ASSERT_EQ(needed, 4 + 2 * 2);
  absl::StatusOr<std::vector<int32_t>> allocated = bm.Allocate(static_cast<int32_t>(needed));
  ASSERT_TRUE(allocated.ok());
  absl::StatusOr<ChoiceTables> forked = ForkChoiceTables(bm, *allocated, 4, 40, 16, 3);
  ASSERT_TRUE(forked.ok()) << forked.status();
  ASSERT_EQ(forked->tables.size(), 3u);
  EXPECT_THAT(forked->tables[0], ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(forked->tables[1], ElementsAre(0, 1, 4, 5));
  EXPECT_THAT(forked->tables[2], ElementsAre(0, 1, 6, 7));
  // Copy-on-write of the partial block: choice 0's block 2 into each further choice's own.
  EXPECT_THAT(forked->copies, ElementsAre(Pair(2, 4), Pair(2, 6)));
  EXPECT_EQ(bm.RefCount(0), 3);
  EXPECT_EQ(bm.RefCount(1), 3);
  EXPECT_EQ(bm.RefCount(2), 1);
  EXPECT_EQ(bm.RefCount(4), 1);
  EXPECT_EQ(bm.free_blocks(), start - 8);
  // Choices end in any order (one cancelled, one failed, one finished): nothing leaks.
  ASSERT_TRUE(bm.Free(forked->tables[1]).ok());
  EXPECT_EQ(bm.RefCount(0), 2);
  EXPECT_EQ(bm.free_blocks(), start - 6);
  ASSERT_TRUE(bm.Free(forked->tables[0]).ok());
  EXPECT_EQ(bm.RefCount(0), 1);
  EXPECT_EQ(bm.free_blocks(), start - 4);  // choice 2 still holds 0, 1, 6, 7
  ASSERT_TRUE(bm.Free(forked->tables[2]).ok());
  EXPECT_EQ(bm.free_blocks(), start);
  EXPECT_EQ(bm.free_errors(), 0);
}

TEST(ChoiceBlocksTest, PromptOnABlockBoundaryNeedsNoCopy) {
  BlockManager bm(16);
  const int64_t needed = ChoiceBlocksNeeded(3, 32, 16, 2);
  absl::StatusOr<std::vector<int32_t>> allocated = bm.Allocate(static_cast<int32_t>(needed));
  ASSERT_TRUE(allocated.ok());
  absl::StatusOr<ChoiceTables> forked = ForkChoiceTables(bm, *allocated, 3, 32, 16, 2);
  ASSERT_TRUE(forked.ok()) << forked.status();
  EXPECT_THAT(forked->tables[0], ElementsAre(0, 1, 2));
  EXPECT_THAT(forked->tables[1], ElementsAre(0, 1, 3));
  EXPECT_TRUE(forked->copies.empty());
  for (const auto& t : forked->tables) bm.Release(t);
  EXPECT_EQ(bm.free_blocks(), 16);
}

TEST(ChoiceBlocksTest, OneChoiceIsItsTableUnchanged) {
  BlockManager bm(8);
  absl::StatusOr<std::vector<int32_t>> allocated = bm.Allocate(3);
  ASSERT_TRUE(allocated.ok());
  absl::StatusOr<ChoiceTables> forked = ForkChoiceTables(bm, *allocated, 3, 40, 16, 1);
  ASSERT_TRUE(forked.ok());
  EXPECT_THAT(forked->tables, ElementsAre(ElementsAre(0, 1, 2)));
  EXPECT_TRUE(forked->copies.empty());
  EXPECT_EQ(bm.RefCount(0), 1);
}

TEST(ChoiceBlocksTest, WrongCountChangesNothing) {
  BlockManager bm(16);
  absl::StatusOr<std::vector<int32_t>> allocated = bm.Allocate(5);
  ASSERT_TRUE(allocated.ok());
  const absl::StatusOr<ChoiceTables> forked = ForkChoiceTables(bm, *allocated, 4, 40, 16, 3);
  EXPECT_EQ(forked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(forked.status().message(), HasSubstr("need 8 blocks, got 5"));
  for (int32_t b = 0; b < 5; ++b) EXPECT_EQ(bm.RefCount(b), 1);
  EXPECT_EQ(ForkChoiceTables(bm, *allocated, 5, 40, 16, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  bm.Release(*allocated);
  EXPECT_EQ(bm.free_blocks(), 16);
}

}  // namespace
}  // namespace tandem
