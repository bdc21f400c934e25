#include "engine/block_manager.h"

#include <thread>

#include "absl/time/clock.h"
#include "common/cancellation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BlockManagerTest, AllocatesLowestIdsAndFreesByRefcount) {
  BlockManager bm(8);
  auto a = bm.Allocate(3);
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(*a, ElementsAre(0, 1, 2));
  auto b = bm.Allocate(2);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(*b, ElementsAre(3, 4));
  EXPECT_EQ(bm.free_blocks(), 3);
  ASSERT_TRUE(bm.AddRef(*a).ok());
  ASSERT_TRUE(bm.Free(*a).ok());
  EXPECT_EQ(bm.free_blocks(), 3);  // still referenced once
  ASSERT_TRUE(bm.Free(*a).ok());
  EXPECT_EQ(bm.free_blocks(), 6);
  auto c = bm.Allocate(4);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(*c, ElementsAre(0, 1, 2, 5));
}

TEST(BlockManagerTest, ExhaustionAllocatesNothing) {
  BlockManager bm(4);
  ASSERT_TRUE(bm.Allocate(3).ok());
  const auto r = bm.Allocate(2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("need 2 blocks, 1 of 4 free"));
  EXPECT_EQ(bm.free_blocks(), 1);
}

TEST(BlockManagerTest, ExtendGrowsATable) {
  BlockManager bm(6);
  std::vector<int32_t> table = *bm.Allocate(2);
  ASSERT_TRUE(bm.Extend(&table, 5).ok());
  EXPECT_THAT(table, ElementsAre(0, 1, 2, 3, 4));
  ASSERT_TRUE(bm.Extend(&table, 3).ok());  // already long enough
  EXPECT_EQ(table.size(), 5u);
  EXPECT_EQ(bm.Extend(&table, 7).code(), absl::StatusCode::kResourceExhausted);
}

TEST(BlockManagerTest, RejectsFreeingUnallocatedBlocks) {
  BlockManager bm(4);
  const std::vector<int32_t> a = *bm.Allocate(1);
  EXPECT_THAT(bm.Free(std::vector<int32_t>{2}).message(), HasSubstr("block 2 is not allocated"));
  EXPECT_THAT(bm.Free(std::vector<int32_t>{9}).message(), HasSubstr("outside [0, 4)"));
  EXPECT_EQ(bm.Free(std::vector<int32_t>{0, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.free_blocks(), 3);  // nothing changed
  EXPECT_EQ(bm.free_errors(), 3);  // each failure is counted
  ASSERT_TRUE(bm.Free(a).ok());
  EXPECT_EQ(bm.free_blocks(), 4);
  EXPECT_EQ(bm.free_errors(), 3);
}

TEST(BlockManagerTest, ReleaseCountsWhatItCannotReturn) {
  BlockManager bm(4);
  const std::vector<int32_t> a = *bm.Allocate(2);
  EXPECT_EQ(bm.free_errors(), 0);
  bm.Release(a);
  EXPECT_EQ(bm.free_blocks(), 4);
  EXPECT_EQ(bm.free_errors(), 0);
  bm.Release(a);  // a double free: nothing changes, the error is counted
  EXPECT_EQ(bm.free_blocks(), 4);
  EXPECT_EQ(bm.free_errors(), 1);
}

TEST(BlockManagerTest, GenerationsBumpOnEveryFreeAndFenceStaleHolders) {
  BlockManager bm(4);
  const std::vector<int32_t> a = *bm.Allocate(2);
  const std::vector<uint32_t> g = *bm.Generations(a);
  EXPECT_EQ(g, (std::vector<uint32_t>{0, 0}));
  EXPECT_TRUE(bm.FreedSince(a, g)->empty());
  ASSERT_TRUE(bm.AddRef(a).ok());
  ASSERT_TRUE(bm.Free(a).ok());  // one reference left: not freed, generation unchanged
  EXPECT_TRUE(bm.FreedSince(a, g)->empty());
  ASSERT_TRUE(bm.Free(std::vector<int32_t>{a[1]}).ok());  // block 1 freed
  EXPECT_EQ(*bm.FreedSince(a, g), (std::vector<int32_t>{a[1]}));
  ASSERT_TRUE(bm.Free(std::vector<int32_t>{a[0]}).ok());
  EXPECT_EQ(*bm.Generations(a), (std::vector<uint32_t>{1, 1}));
  // Reallocated to someone else: still stale for the old holder, whatever the refcount says.
  const std::vector<int32_t> b = *bm.Allocate(4);
  EXPECT_EQ(*bm.FreedSince(a, g), a);
  EXPECT_TRUE(bm.FreedSince(a, *bm.Generations(a))->empty());
  EXPECT_EQ(bm.FreedSince(a, std::vector<uint32_t>{1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.Generations(std::vector<int32_t>{4}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(bm.Free(b).ok());
}

// A request waiting for KV capacity (the decode node's WaitForBlocks) sleeps in AwaitFree and is
// woken by the Free that makes room, not by a poll: the deadlines are an hour away, so a wait
// that missed the Free (or the cancel) would run into the test's timeout.
TEST(BlockManagerTest, AwaitFreeIsWokenByTheFreeThatMakesRoom) {
  BlockManager bm(4);
  auto held = bm.Allocate(3);
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(bm.AwaitFree(1, absl::InfinitePast()));                   // enough already: no wait
  EXPECT_FALSE(bm.AwaitFree(2, absl::Now() + absl::Milliseconds(20)));  // the deadline ends it

  const absl::Time far = absl::Now() + absl::Hours(1);
  std::thread freer([&] {
    ASSERT_TRUE(bm.Free({(*held)[0]}).ok());
    ASSERT_TRUE(bm.Free({(*held)[1]}).ok());
  });
  EXPECT_TRUE(bm.AwaitFree(3, far));
  freer.join();
  EXPECT_EQ(bm.free_blocks(), 3);
}

TEST(BlockManagerTest, AwaitFreeEndsAtTheStopTokensCancel) {
  BlockManager bm(2);
  auto held = bm.Allocate(2);
  ASSERT_TRUE(held.ok());
  const absl::Time far = absl::Now() + absl::Hours(1);
  CancellationToken cancelled;
  cancelled.Cancel();
  EXPECT_FALSE(bm.AwaitFree(1, far, &cancelled));

  CancellationToken stop;
  std::thread canceller([&stop] { stop.Cancel(); });
  EXPECT_FALSE(bm.AwaitFree(1, far, &stop));
  canceller.join();
  ASSERT_TRUE(bm.Free(*held).ok());
  EXPECT_TRUE(bm.AwaitFree(2, far, &stop));  // enough free wins over a cancelled token
}

}  // namespace
}  // namespace tandem
