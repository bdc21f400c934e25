// PlanKvTransferRange (pipelined transfer): over layout pairs with different TP, PCP, DCP, block
// size and interleave, and chunkings whose boundaries fall anywhere inside either side's blocks,
//   * every byte a range plan writes belongs to a token of that range (the prefill may still be
//     writing the others), except the whole plan's slots past the prompt in the final range;
//   * the range plans of a partition of [0, num_tokens) write every prompt token row of the
//     whole plan once, from the same source rank and offset (rows past the prompt: see above).
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/dcp_layout.h"
#include "attention/parallel_layout.h"
#include "gtest/gtest.h"
#include "kv_transfer/planner.h"

namespace tandem {
namespace {

using Copies = std::vector<TransferCopy>;

// DCP groups span TP replicas of the same KV heads: layouts with dcp > 1 get one KV head.
KvLayout Layout(ParallelConfig p, int32_t hkv) {
  return KvLayout{p, ModelDims{2, 8 * hkv, hkv, 4}, KvDType::kF32};
}

// Block tables with scattered, partly consecutive ids (sources and destinations differ).
std::vector<int32_t> Table(const KvLayout& l, int64_t num_tokens, int32_t salt) {
  const int64_t n = VirtualBlocksFor(l.parallel.dcp_geometry(), num_tokens);
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) {
    t.push_back(static_cast<int32_t>((i % 3 == 2 ? 40 : 3) + i * 2 + salt));
  }
  return t;
}

// Every destination token row a plan writes for a prompt token (position < num_tokens):
// (rank, dst byte) -> (source rank, source byte). A row written twice is reported in *error.
using RowMap = std::map<std::pair<int32_t, int64_t>, std::pair<int32_t, int64_t>>;

void AddRows(const KvLayout& dst, const std::vector<int32_t>& dst_blocks, int64_t num_tokens,
             const TransferPlan& plan, RowMap* rows, std::string* error) {
  const DcpGeometry g = dst.parallel.dcp_geometry();
  std::map<int32_t, int64_t> vblock_of;
  for (size_t i = 0; i < dst_blocks.size(); ++i) vblock_of[dst_blocks[i]] = std::ssize(vblock_of);
  for (int32_t d = 0; d < dst.world(); ++d) {
    const PoolGeometry pg = RankPoolGeometry(dst, d);
    const int32_t dcp_rank = PlaceRank(dst.parallel, dst.dims, d).dcp_rank;
    const int64_t token_bytes = int64_t{pg.head_dim} * pg.elem_bytes();
    const int64_t row_bytes = pg.row_elems() * pg.elem_bytes();
    for (const TransferCopy& c : plan.copies[d]) {
      for (int64_t o = 0; o < c.length; o += token_bytes) {
        const int64_t at = c.dst_offset + o;
        const int64_t slot =
            (at % pg.block_bytes()) % pg.head_slab_bytes() % row_bytes / token_bytes;
        const int64_t vb = vblock_of.at(static_cast<int32_t>(at / pg.block_bytes()));
        if (GlobalPosition(g, dcp_rank, vb * g.block_size + slot) >= num_tokens) continue;
        if (!rows->emplace(std::make_pair(d, at), std::make_pair(c.src_rank, c.src_offset + o))
                 .second) {
          *error = absl::StrCat("rank ", d, " byte ", at, " written twice");
        }
      }
    }
  }
}

struct Case {
  ParallelConfig src;
  ParallelConfig dst;
};

// Source layouts may use PCP; destinations are decode layouts (pcp = 1).
const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {{1, 1, 1, 16, 16}, {1, 1, 1, 16, 16}},  // identical, whole slabs
      {{1, 1, 1, 16, 1}, {1, 1, 1, 4, 1}},     // B16 -> B4 (token runs)
      {{2, 1, 1, 8, 8}, {1, 1, 1, 16, 16}},    // TP2 -> TP1, different B
      {{1, 1, 1, 4, 4}, {2, 1, 2, 8, 1}},      // DCP2 interleave 1 on the destination
      {{2, 1, 2, 8, 4}, {2, 1, 2, 8, 2}},      // DCP on both, different interleave
      {{1, 2, 1, 8, 8}, {2, 1, 1, 8, 8}},      // PCP2 source -> TP2
      {{2, 2, 4, 4, 1}, {1, 1, 1, 16, 16}},    // PCP2 x TP2 with DCP4 -> TP1
      {{2, 2, 2, 8, 2}, {4, 1, 4, 4, 2}},      // PCP x DCP -> TP4 DCP4
      {{4, 1, 1, 8, 8}, {1, 1, 1, 8, 8}},      // more source replicas than destinations
  };
  return cases;
}

// Chunk boundaries for num_tokens: fixed chunk sizes aligned with neither side's block size
// (max_prefill_tokens values), and one uneven split.
std::vector<std::vector<int64_t>> Chunkings(int64_t n) {
  std::vector<std::vector<int64_t>> out;
  for (const int64_t step :
       {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{13}, int64_t{16}, int64_t{33}}) {
    std::vector<int64_t> b = {0};
    while (b.back() < n) b.push_back(std::min(n, b.back() + step));
    out.push_back(b);
  }
  out.push_back({0, std::min<int64_t>(n, 5), std::min<int64_t>(n, 6), n});
  return out;
}

// First error found in range [begin, end)'s plan: a destination byte of a token outside it.
std::string CheckTokensOfRange(const KvLayout& dst, const std::vector<int32_t>& dst_blocks,
                               int64_t num_tokens, int64_t begin, int64_t end,
                               const TransferPlan& plan) {
  const DcpGeometry g = dst.parallel.dcp_geometry();
  std::vector<int64_t> vblock_of(1024, -1);
  for (size_t i = 0; i < dst_blocks.size(); ++i) vblock_of[dst_blocks[i]] = static_cast<int64_t>(i);
  for (int32_t d = 0; d < dst.world(); ++d) {
    const PoolGeometry pg = RankPoolGeometry(dst, d);
    const int32_t dcp_rank = PlaceRank(dst.parallel, dst.dims, d).dcp_rank;
    const int64_t token_bytes = int64_t{pg.head_dim} * pg.elem_bytes();
    const int64_t row_bytes = pg.row_elems() * pg.elem_bytes();
    for (const TransferCopy& c : plan.copies[d]) {
      if (c.length % token_bytes != 0 || c.dst_offset % token_bytes != 0) {
        return absl::StrCat("rank ", d, ": copy at ", c.dst_offset, " not token-aligned");
      }
      for (int64_t o = c.dst_offset; o < c.dst_offset + c.length; o += token_bytes) {
        const int64_t block = o / pg.block_bytes();
        const int64_t slot =
            (o % pg.block_bytes()) % pg.head_slab_bytes() % row_bytes / token_bytes;
        const int64_t vb = vblock_of[block];
        if (vb < 0) return absl::StrCat("rank ", d, ": write into unallocated block ", block);
        const int64_t pos = GlobalPosition(g, dcp_rank, vb * g.block_size + slot);
        const bool tail = end == num_tokens && pos >= num_tokens;
        if ((pos < begin || pos >= end) && !tail) {
          return absl::StrCat("rank ", d, ": range [", begin, ", ", end, ") writes position ", pos,
                              " (dst byte ", o, ")");
        }
      }
    }
  }
  return "";
}

TEST(PlannerRangeTest, RangesCoverExactlyTheirTokensAndPartitionTheWholePlan) {
  int checked = 0;
  for (const Case& k : Cases()) {
    const int32_t hkv = k.src.dcp > 1 || k.dst.dcp > 1 ? 1 : 4;
    const KvLayout src = Layout(k.src, hkv);
    const KvLayout dst = Layout(k.dst, hkv);
    for (const int64_t n :
         {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{61}, int64_t{100}}) {
      const std::vector<int32_t> sb = Table(src, n, 0);
      const std::vector<int32_t> db = Table(dst, n, 1);
      absl::StatusOr<TransferPlan> whole = PlanKvTransfer(src, sb, dst, db, n);
      ASSERT_TRUE(whole.ok()) << whole.status();
      for (const std::vector<int64_t>& bounds : Chunkings(n)) {
        const std::string what =
            absl::StrCat(k.src.ToString(), " pcp=", k.src.pcp, " -> ", k.dst.ToString(), " n=", n,
                         " first chunk ", bounds.size() > 1 ? bounds[1] : 0);
        RowMap joined;
        std::string error;
        for (size_t i = 0; i + 1 < bounds.size(); ++i) {
          absl::StatusOr<TransferPlan> part =
              PlanKvTransferRange(src, sb, dst, db, n, bounds[i], bounds[i + 1]);
          ASSERT_TRUE(part.ok()) << part.status();
          ASSERT_EQ(std::ssize(part->copies), dst.world());
          ASSERT_EQ(CheckTokensOfRange(dst, db, n, bounds[i], bounds[i + 1], *part), "") << what;
          AddRows(dst, db, n, *part, &joined, &error);
        }
        EXPECT_EQ(error, "") << what;
        RowMap expected;
        AddRows(dst, db, n, *whole, &expected, &error);
        ASSERT_EQ(error, "") << what;
        EXPECT_EQ(joined, expected) << what;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 9 * 6 * 7);
}

TEST(PlannerRangeTest, FullRangeIsTheWholePlan) {
  const KvLayout src = Layout({2, 2, 2, 8, 2}, 1);
  const KvLayout dst = Layout({4, 1, 4, 4, 2}, 1);
  const std::vector<int32_t> sb = Table(src, 77, 0);
  const std::vector<int32_t> db = Table(dst, 77, 1);
  absl::StatusOr<TransferPlan> whole = PlanKvTransfer(src, sb, dst, db, 77);
  absl::StatusOr<TransferPlan> range = PlanKvTransferRange(src, sb, dst, db, 77, 0, 77);
  ASSERT_TRUE(whole.ok() && range.ok());
  EXPECT_EQ(whole->copies, range->copies);
}

TEST(PlannerRangeTest, AChunkInsideOneMatchedBlockIsNotAWholeSlab) {
  // Identical layouts copy whole slabs; a chunk ending inside a block must not (the rest of the
  // block is still being written): tokens [0, 5) of a B=16 block are 5 token rows per
  // (head, layer, K|V) row: 4 heads x 2 layers x 2 = 16 copies of 5 x 16 bytes.
  const KvLayout l = Layout({1, 1, 1, 16, 16}, 4);
  absl::StatusOr<TransferPlan> p = PlanKvTransferRange(l, {7, 8}, l, {2, 3}, 20, 0, 5);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->copies[0].size(), 16u);
  for (const TransferCopy& c : p->copies[0]) EXPECT_EQ(c.length, 5 * 16);
  EXPECT_EQ(p->total_bytes(), 16 * 5 * 16);
}

TEST(PlannerRangeTest, EmptyRangeHasNoCopies) {
  const KvLayout l = Layout({2, 1, 2, 8, 1}, 1);
  absl::StatusOr<TransferPlan> p = PlanKvTransferRange(l, {1, 2}, l, {3, 4}, 20, 9, 9);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(std::ssize(p->copies), 2);
  EXPECT_EQ(p->total_copies(), 0);
}

TEST(PlannerRangeTest, RangeOutsideThePromptIsRejected) {
  const KvLayout l = Layout({1, 1, 1, 16, 16}, 4);
  for (const auto& [b, e] : {std::pair<int64_t, int64_t>{-1, 3}, {4, 3}, {0, 21}}) {
    absl::StatusOr<TransferPlan> p = PlanKvTransferRange(l, {1, 2}, l, {3, 4}, 20, b, e);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("is not inside [0, 20)"), std::string::npos) << p.status();
  }
}

}  // namespace
}  // namespace tandem
