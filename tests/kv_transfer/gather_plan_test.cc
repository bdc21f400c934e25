// PlanGather (kv_transfer/gather_plan.h): every copy is carried exactly once, by a direct read or
// by one segment, and executing the gather plan (segment reads into staging, then the pieces)
// writes exactly the bytes the copy list writes — over random copy lists and over real
// token-granular plans from the planner.
#include "kv_transfer/gather_plan.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <random>
#include <vector>

#include "attention/dcp_layout.h"
#include "gtest/gtest.h"
#include "kv_transfer/planner.h"

namespace tandem {
namespace {

constexpr int64_t kPoolBytes = 1 << 16;

// Source pools whose every byte says where it came from.
std::vector<std::vector<uint8_t>> SourcePools(int32_t ranks) {
  std::vector<std::vector<uint8_t>> pools(ranks, std::vector<uint8_t>(kPoolBytes));
  for (int32_t r = 0; r < ranks; ++r) {
    for (int64_t i = 0; i < kPoolBytes; ++i) pools[r][i] = static_cast<uint8_t>(i * 7 + r * 31);
  }
  return pools;
}

std::vector<uint8_t> ApplyCopies(const std::vector<std::vector<uint8_t>>& src,
                                 const std::vector<TransferCopy>& copies, int64_t dst_bytes) {
  std::vector<uint8_t> dst(dst_bytes, 0xee);
  for (const TransferCopy& c : copies) {
    std::copy_n(src[c.src_rank].begin() + c.src_offset, c.length, dst.begin() + c.dst_offset);
  }
  return dst;
}

// What a puller does with the plan: direct copies, then each segment read whole and scattered.
std::vector<uint8_t> ApplyGather(const std::vector<std::vector<uint8_t>>& src,
                                 const std::vector<TransferCopy>& copies, const GatherPlan& plan,
                                 int64_t dst_bytes) {
  std::vector<uint8_t> dst(dst_bytes, 0xee);
  for (int64_t i : plan.direct) {
    const TransferCopy& c = copies[i];
    std::copy_n(src[c.src_rank].begin() + c.src_offset, c.length, dst.begin() + c.dst_offset);
  }
  for (const GatherSegment& s : plan.segments) {
    std::vector<uint8_t> staging(src[s.src_rank].begin() + s.src_offset,
                                 src[s.src_rank].begin() + s.src_offset + s.length);
    for (int64_t p = s.first_piece; p < s.first_piece + s.num_pieces; ++p) {
      const GatherPiece& piece = plan.pieces[p];
      EXPECT_GE(piece.segment_offset, 0);
      EXPECT_LE(piece.segment_offset + piece.length, s.length);
      std::copy_n(staging.begin() + piece.segment_offset, piece.length,
                  dst.begin() + piece.dst_offset);
    }
  }
  return dst;
}

// Structural invariants of a plan for `copies` under `o`.
void CheckInvariants(const std::vector<TransferCopy>& copies, const GatherPlan& plan,
                     const GatherOptions& o, const std::vector<bool>& gatherable) {
  EXPECT_TRUE(std::is_sorted(plan.direct.begin(), plan.direct.end()));
  EXPECT_EQ(std::adjacent_find(plan.direct.begin(), plan.direct.end()), plan.direct.end());
  int64_t carried = static_cast<int64_t>(plan.direct.size());
  int64_t piece_bytes = 0;
  for (const GatherSegment& s : plan.segments) {
    EXPECT_GE(s.copies, 2);
    EXPECT_GE(s.num_pieces, 1);
    EXPECT_LE(s.length, o.max_segment_bytes);
    EXPECT_TRUE(gatherable[s.src_rank]);
    EXPECT_GE(s.src_offset, 0);
    EXPECT_LE(s.src_offset + s.length, kPoolBytes);
    carried += s.copies;
    int64_t bytes = 0;
    for (int64_t p = s.first_piece; p < s.first_piece + s.num_pieces; ++p) {
      bytes += plan.pieces[p].length;
    }
    EXPECT_EQ(bytes, s.copy_bytes);
    piece_bytes += bytes;
  }
  EXPECT_EQ(carried, static_cast<int64_t>(copies.size()));
  int64_t direct_bytes = 0;
  for (int64_t i : plan.direct) direct_bytes += copies[i].length;
  int64_t total = 0;
  for (const TransferCopy& c : copies) {
    total += c.length;
  }
  EXPECT_EQ(direct_bytes + piece_bytes, total);
  // Large copies and copies of non-gatherable ranks are never gathered.
  std::vector<bool> is_direct(copies.size(), false);
  for (int64_t i : plan.direct) is_direct[i] = true;
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].length >= o.min_direct_bytes || !gatherable[copies[i].src_rank]) {
      EXPECT_TRUE(is_direct[i]) << "copy " << i;
    }
  }
}

// Random copy lists: non-overlapping destination ranges in random order, source ranges from a
// few ranks, some adjacent (token-granular style), some overlapping, some far apart.
std::vector<TransferCopy> RandomCopies(std::mt19937& rng, int32_t ranks, int64_t* dst_bytes) {
  std::uniform_int_distribution<int32_t> rank(0, ranks - 1);
  std::uniform_int_distribution<int64_t> len(1, 300);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<TransferCopy> copies;
  std::vector<int64_t> cursor(ranks, 0);
  int64_t dst = 0;
  const int count = std::uniform_int_distribution<int>(0, 400)(rng);
  for (int i = 0; i < count; ++i) {
    const int32_t r = rank(rng);
    const int64_t length = pick(rng) == 0 ? 2000 + len(rng) : len(rng);
    int64_t src = cursor[r];
    const int kind = pick(rng);
    if (kind == 1) src += len(rng) * 8;                         // a hole, maybe too big
    if (kind == 2) src = std::max<int64_t>(0, src - len(rng));  // overlaps the previous one
    if (src + length > kPoolBytes) src = 0;
    cursor[r] = src + length;
    copies.push_back(TransferCopy{r, src, dst, length});
    dst += length + (pick(rng) == 0 ? 16 : 0);
  }
  std::shuffle(copies.begin(), copies.end(), rng);
  *dst_bytes = dst + 1;
  return copies;
}

TEST(GatherPlanTest, RandomCopyListsAreCarriedExactlyOnce) {
  std::mt19937 rng(20261201);
  const std::vector<GatherOptions> options = {
      {64 * 1024, 1024 * 1024, 4096}, {256, 1024, 0}, {64, 64, 7}, {1, 1, 0}, {512, 4096, 100}};
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t ranks = 1 + trial % 4;
    int64_t dst_bytes = 0;
    const std::vector<TransferCopy> copies = RandomCopies(rng, ranks, &dst_bytes);
    const auto src = SourcePools(ranks);
    const std::vector<uint8_t> want = ApplyCopies(src, copies, dst_bytes);
    for (size_t oi = 0; oi < options.size(); ++oi) {
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " options " << oi);
      std::vector<bool> gatherable(ranks, true);
      if (trial % 5 == 4) gatherable[0] = false;
      const GatherPlan plan = PlanGather(
          copies, options[oi], [&](int32_t r) { return static_cast<bool>(gatherable[r]); });
      CheckInvariants(copies, plan, options[oi], gatherable);
      EXPECT_EQ(ApplyGather(src, copies, plan, dst_bytes), want);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(GatherPlanTest, AdjacentSmallCopiesBecomeOneSegmentAndHolesAreBounded) {
  // Rank 0: four 100-byte copies back to back at 1000, then one at 1500 (a 100-byte hole) and
  // one at 5000 (too far). Destination order is reversed, so no piece merges.
  std::vector<TransferCopy> copies;
  for (int i = 0; i < 4; ++i) copies.push_back({0, 1000 + 100 * i, 1000 - 100 * i, 100});
  copies.push_back({0, 1500, 2000, 100});
  copies.push_back({0, 5000, 3000, 100});
  const GatherPlan plan =
      PlanGather(copies, GatherOptions{1024, 4096, 100}, [](int32_t) { return true; });
  ASSERT_EQ(plan.segments.size(), 1u);
  EXPECT_EQ(plan.segments[0], (GatherSegment{0, 1000, 600, 0, 5, 5, 500}));
  EXPECT_EQ(plan.segment_bytes(), 600);
  EXPECT_EQ(plan.direct, std::vector<int64_t>{5});  // alone: a segment would not save a get
  EXPECT_EQ(plan.pieces[4], (GatherPiece{500, 2000, 100}));
}

TEST(GatherPlanTest, PiecesContiguousOnBothSidesMergeAndSegmentsAlternateRanks) {
  // Rank 0 and rank 1 each hold 8 copies of 16 bytes, contiguous on both sides per rank; the
  // destination interleaves the two ranks every 4 copies.
  std::vector<TransferCopy> copies;
  int64_t dst = 0;
  for (int block = 0; block < 4; ++block) {
    for (int32_t r = 0; r < 2; ++r) {
      for (int i = 0; i < 2; ++i) {
        const int64_t k = block * 2 + i;
        copies.push_back({r, 16 * k, dst, 16});
        dst += 16;
      }
    }
  }
  // Segments of at most 64 bytes: each rank's 128 source bytes make two segments.
  const GatherPlan plan =
      PlanGather(copies, GatherOptions{64, 64, 0}, [](int32_t) { return true; });
  ASSERT_EQ(plan.segments.size(), 4u);
  EXPECT_EQ(plan.segments[0].src_rank, 0);
  EXPECT_EQ(plan.segments[1].src_rank, 1);
  EXPECT_EQ(plan.segments[2].src_rank, 0);
  EXPECT_EQ(plan.segments[3].src_rank, 1);
  EXPECT_EQ(plan.segments[2].src_offset, 64);
  for (const GatherSegment& s : plan.segments) {
    EXPECT_EQ(s.copies, 4);
    EXPECT_EQ(s.num_pieces, 2);  // two runs of two copies that are contiguous on both sides
  }
  EXPECT_TRUE(plan.direct.empty());
}

TEST(GatherPlanTest, LargeCopiesAndUngatherableRanksStayDirect) {
  const std::vector<TransferCopy> copies = {
      {0, 0, 0, 4096}, {0, 4096, 4096, 4096}, {1, 0, 8192, 10}, {1, 10, 9000, 10}};
  const GatherPlan plan =
      PlanGather(copies, GatherOptions{4096, 8192, 0}, [](int32_t r) { return r == 0; });
  EXPECT_TRUE(plan.segments.empty());
  EXPECT_EQ(plan.direct, (std::vector<int64_t>{0, 1, 2, 3}));
}

// The planner's token-granular plans: DCP 2 with interleave 1 into DCP 1 (every destination row
// alternates source ranks, so no copy merges), with scattered block tables. Gathering reads
// each source rank's blocks in a handful of segments with no wasted bytes when the prompt fills
// whole blocks, and reproduces the plan byte for byte.
TEST(GatherPlanTest, TokenGranularPlansCollapseIntoFewSegments) {
  const ModelDims dims{/*num_layers=*/2, /*num_q_heads=*/4, /*num_kv_heads=*/2, /*head_dim=*/8};
  const KvLayout src{ParallelConfig{1, 2, 2, 16, 1}, dims, KvDType::kF32};
  const KvLayout dst{ParallelConfig{1, 1, 1, 16, 16}, dims, KvDType::kF32};
  for (const int64_t tokens : {int64_t{256}, int64_t{250}}) {
    SCOPED_TRACE(::testing::Message() << tokens << " tokens");
    const int64_t src_used = VirtualBlocksFor(src.parallel.dcp_geometry(), tokens);
    const int64_t dst_used = VirtualBlocksFor(dst.parallel.dcp_geometry(), tokens);
    std::vector<int32_t> src_blocks(src_used), dst_blocks(dst_used);
    std::iota(src_blocks.rbegin(), src_blocks.rend(), 0);  // descending: scattered
    for (int64_t i = 0; i < dst_used; ++i) dst_blocks[i] = static_cast<int32_t>((i * 5) % dst_used);
    absl::StatusOr<TransferPlan> plan = PlanKvTransfer(src, src_blocks, dst, dst_blocks, tokens);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const std::vector<TransferCopy>& copies = plan->copies[0];
    ASSERT_GT(copies.size(), 1000u);
    const GatherOptions options{64 * 1024, 1024 * 1024, 4096};
    const GatherPlan g = PlanGather(copies, options, [](int32_t) { return true; });
    std::vector<bool> all(2, true);
    CheckInvariants(copies, g, options, all);
    EXPECT_TRUE(g.direct.empty());
    EXPECT_LE(g.segments.size(), 4u);  // a few KiB per source rank: one segment each
    if (tokens == 256) {
      EXPECT_EQ(g.segment_bytes(), plan->total_bytes());
    }
    const auto pools = SourcePools(2);
    int64_t dst_bytes = 0;
    for (const TransferCopy& c : copies) dst_bytes = std::max(dst_bytes, c.dst_offset + c.length);
    EXPECT_EQ(ApplyGather(pools, copies, g, dst_bytes), ApplyCopies(pools, copies, dst_bytes));
  }
}

}  // namespace
}  // namespace tandem
