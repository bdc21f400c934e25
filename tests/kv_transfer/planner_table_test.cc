// Hand-checked plans over recorded layouts: exact copies, byte offsets worked out by hand.
//
// Unless a case says otherwise: layers = 2, head_dim = 4, f32. So one token row is 16 bytes, a
// (head, layer, K|V) row of B = 4 slots is 64 bytes, a head slab is 2·2·64 = 256 bytes and a block
// is heads_per_rank · 256 bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv_transfer/planner.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using Copies = std::vector<TransferCopy>;

KvLayout Layout(int32_t tp, int32_t pcp, int32_t dcp, int32_t B, int32_t I, int32_t hkv,
                int32_t layers = 2, int32_t head_dim = 4) {
  return KvLayout{ParallelConfig{tp, pcp, dcp, B, I}, ModelDims{layers, 8 * hkv, hkv, head_dim},
                  KvDType::kF32};
}

std::vector<Copies> Plan(const KvLayout& src, const std::vector<int32_t>& src_blocks,
                         const KvLayout& dst, const std::vector<int32_t>& dst_blocks,
                         int64_t num_tokens) {
  absl::StatusOr<TransferPlan> plan = PlanKvTransfer(src, src_blocks, dst, dst_blocks, num_tokens);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->copies : std::vector<Copies>{};
}

TransferCopy C(int32_t src_rank, int64_t src_offset, int64_t dst_offset, int64_t length) {
  return TransferCopy{src_rank, src_offset, dst_offset, length};
}

TEST(PlannerTableTest, MatchedContiguousBlocksAreOneCopy) {
  // tp1 -> tp1, 2 heads (512-byte blocks), 3 blocks contiguous on both sides.
  const KvLayout l = Layout(1, 1, 1, 4, 4, 2);
  EXPECT_THAT(Plan(l, {0, 1, 2}, l, {5, 6, 7}, 12), ElementsAre(ElementsAre(C(0, 0, 2560, 1536))));
  // The prompt ends inside the last block: still whole slabs, still one copy.
  EXPECT_THAT(Plan(l, {0, 1, 2}, l, {5, 6, 7}, 10), ElementsAre(ElementsAre(C(0, 0, 2560, 1536))));
  // A break in either table splits the copy.
  EXPECT_THAT(Plan(l, {0, 1, 3}, l, {5, 6, 7}, 12),
              ElementsAre(ElementsAre(C(0, 0, 2560, 1024), C(0, 1536, 3584, 512))));
}

TEST(PlannerTableTest, ReversedTablesStillMergeInDestinationOrder) {
  // Copies are emitted by ascending destination id: [7,6,5] <- [2,1,0] is one range.
  const KvLayout l = Layout(1, 1, 1, 4, 4, 2);
  EXPECT_THAT(Plan(l, {2, 1, 0}, l, {7, 6, 5}, 12), ElementsAre(ElementsAre(C(0, 0, 2560, 1536))));
}

TEST(PlannerTableTest, DcpTwoToOneWithInterleaveEqualBlock) {
  // Hkv = 1: source tp2 replicates the head and dcp2 splits tokens: V = 8, rank t owns
  // positions 8·vb + 4t .. +3 in block table[vb]. Destination tp1: V = 4. 256-byte blocks.
  const KvLayout src = Layout(2, 1, 2, 4, 4, 1);
  const KvLayout dst = Layout(1, 1, 1, 4, 4, 1);
  EXPECT_THAT(Plan(src, {3, 7}, dst, {0, 1, 2, 3}, 16),
              ElementsAre(ElementsAre(C(0, 768, 0, 256), C(1, 768, 256, 256), C(0, 1792, 512, 256),
                                      C(1, 1792, 768, 256))));
}

TEST(PlannerTableTest, DcpOneToTwoWithInterleaveEqualBlock) {
  // The reverse: destination rank t owns positions 8·vb + 4t .. +3.
  const KvLayout src = Layout(1, 1, 1, 4, 4, 1);
  const KvLayout dst = Layout(2, 1, 2, 4, 4, 1);
  EXPECT_THAT(Plan(src, {0, 1, 2, 3}, dst, {10, 11}, 16),
              ElementsAre(ElementsAre(C(0, 0, 2560, 256), C(0, 512, 2816, 256)),
                          ElementsAre(C(0, 256, 2560, 256), C(0, 768, 2816, 256))));
}

TEST(PlannerTableTest, HeadMergeTp4ToTp1) {
  // Hkv = 4: each source rank holds one head (256-byte blocks); the destination holds all four
  // (1024-byte blocks). Head h of block 1 comes from rank h's block 2.
  const KvLayout src = Layout(4, 1, 1, 4, 4, 4);
  const KvLayout dst = Layout(1, 1, 1, 4, 4, 4);
  EXPECT_THAT(Plan(src, {2}, dst, {1}, 4),
              ElementsAre(ElementsAre(C(0, 512, 1024, 256), C(1, 512, 1280, 256),
                                      C(2, 512, 1536, 256), C(3, 512, 1792, 256))));
}

TEST(PlannerTableTest, HeadSplitTp1ToTp2) {
  // Hkv = 4: the source holds four heads per block (1024 bytes), each destination rank two (512).
  // Destination rank 1 reads heads 2..3: bytes 512..1023 of each source block.
  const KvLayout src = Layout(1, 1, 1, 4, 4, 4);
  const KvLayout dst = Layout(2, 1, 1, 4, 4, 4);
  EXPECT_THAT(Plan(src, {0, 1}, dst, {4, 5}, 8),
              ElementsAre(ElementsAre(C(0, 0, 2048, 512), C(0, 1024, 2560, 512)),
                          ElementsAre(C(0, 512, 2048, 512), C(0, 1536, 2560, 512))));
}

TEST(PlannerTableTest, TokenGranularDcpOneToTwoWithInterleaveOne) {
  // One layer, head_dim 1, B = 2: token row 4 bytes, (layer, K|V) row 8 bytes, block 16 bytes.
  // Source tp1: positions 0,1 in block 5, positions 2,3 in block 9. Destination tp2 (Hkv = 1)
  // dcp2, I = 1: rank 0 owns positions 0, 2 (slots 0, 1 of block 3), rank 1 owns 1, 3.
  // Each (K|V row, token) is its own copy: the slots are not contiguous on the source.
  const KvLayout src = Layout(1, 1, 1, 2, 1, 1, /*layers=*/1, /*head_dim=*/1);
  const KvLayout dst = Layout(2, 1, 2, 2, 1, 1, /*layers=*/1, /*head_dim=*/1);
  EXPECT_THAT(
      Plan(src, {5, 9}, dst, {3}, 4),
      ElementsAre(
          ElementsAre(C(0, 80, 48, 4), C(0, 144, 52, 4), C(0, 88, 56, 4), C(0, 152, 60, 4)),
          ElementsAre(C(0, 84, 48, 4), C(0, 148, 52, 4), C(0, 92, 56, 4), C(0, 156, 60, 4))));
}

TEST(PlannerTableTest, PcpReplicasSplitThePromptInContiguousPieces) {
  // Source tp1 pcp2 dcp1: ranks 0 and 1 both hold every token. The destination has one replica,
  // so it reads the first half of the virtual blocks from rank 0 and the second from rank 1.
  const KvLayout src = Layout(1, 2, 1, 4, 4, 1);
  const KvLayout dst = Layout(1, 1, 1, 4, 4, 1);
  EXPECT_THAT(Plan(src, {0, 1, 2, 3}, dst, {0, 1, 2, 3}, 16),
              ElementsAre(ElementsAre(C(0, 0, 0, 512), C(1, 512, 512, 512))));
}

TEST(PlannerTableTest, ReplicatedIdenticalLayoutsReadTwinRanks) {
  // tp2 with Hkv = 1 on both sides: destination replica k reads source replica k.
  const KvLayout l = Layout(2, 1, 1, 4, 4, 1);
  EXPECT_THAT(Plan(l, {0, 1}, l, {0, 1}, 8),
              ElementsAre(ElementsAre(C(0, 0, 0, 512)), ElementsAre(C(1, 0, 0, 512))));
}

TEST(PlannerTableTest, ZeroTokensPlanNothing) {
  const KvLayout src = Layout(2, 2, 2, 4, 1, 1);
  const KvLayout dst = Layout(2, 1, 2, 8, 8, 1);
  const std::vector<Copies> copies = Plan(src, {}, dst, {}, 0);
  EXPECT_THAT(copies, ElementsAre(ElementsAre(), ElementsAre()));
}

TEST(PlannerTableTest, TotalsSumOverRanks) {
  const KvLayout src = Layout(1, 1, 1, 4, 4, 4);
  const KvLayout dst = Layout(2, 1, 1, 4, 4, 4);
  const absl::StatusOr<TransferPlan> plan = PlanKvTransfer(src, {{0, 1}}, dst, {{4, 5}}, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->total_copies(), 4);
  EXPECT_EQ(plan->total_bytes(), 2 * 1024);  // every byte of the two source blocks, once
}

}  // namespace
}  // namespace tandem
