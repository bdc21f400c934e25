// PlanAttention: every (row, query head, visible token) is computed by exactly one unit, tiles
// respect their limits, long ranges are split only across threads, and threads get balanced,
// contiguous runs of units.
#include "attention/cpu/attention_plan.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::attention_cpu {
namespace {

struct Rows {
  std::vector<int32_t> request;
  std::vector<int64_t> position;
};

AttentionPlanInput Input(const Rows& rows, DcpGeometry dcp, int32_t rank, int32_t kv_heads,
                         int32_t group, int32_t threads) {
  AttentionPlanInput in;
  in.num_rows = static_cast<int64_t>(rows.request.size());
  in.request = rows.request.data();
  in.position = rows.position.data();
  in.dcp = dcp;
  in.dcp_rank = rank;
  in.num_kv_heads = kv_heads;
  in.group_size = group;
  in.head_dim = 8;
  in.threads = threads;
  in.max_tile_queries = 16;
  in.min_split_tokens = 8;
  return in;
}

// Checks the plan's structural contract for `in`.
void CheckPlan(const AttentionPlanInput& in, const AttentionPlan& plan) {
  ASSERT_EQ(static_cast<int64_t>(plan.visible.size()), in.num_rows);
  for (int64_t r = 0; r < in.num_rows; ++r) {
    if (in.position[r] >= 0) {
      EXPECT_EQ(plan.visible[r], LocalLen(in.dcp, in.dcp_rank, in.position[r] + 1));
    }
  }
  // Each (row, GQA head) lies in exactly one tile; tiles hold one request and fit the limit.
  std::map<std::pair<int64_t, int32_t>, int32_t> tile_of;
  for (int32_t t = 0; t < static_cast<int32_t>(plan.tiles.size()); ++t) {
    const PlanTile& tile = plan.tiles[t];
    EXPECT_LE(tile.num_queries(), in.max_tile_queries);
    EXPECT_LE(tile.num_queries(), plan.max_tile_queries);
    int64_t most = 0;
    for (int32_t i = 0; i < tile.num_rows; ++i) {
      const int64_t row = plan.order[tile.first + i];
      EXPECT_EQ(in.request[row], tile.request);
      most = std::max(most, plan.visible[row]);
      for (int32_t h = tile.head_begin; h < tile.head_begin + tile.head_count; ++h) {
        EXPECT_TRUE(tile_of.emplace(std::make_pair(row, h), t).second) << "row " << row;
      }
    }
    EXPECT_EQ(tile.tokens, most);
  }
  int64_t padding = 0;
  for (int64_t r = 0; r < in.num_rows; ++r) padding += in.position[r] < 0 ? 1 : 0;
  EXPECT_EQ(static_cast<int64_t>(plan.padding.size()), padding);
  for (int64_t r : plan.padding) {
    EXPECT_LT(in.position[r], 0);
    EXPECT_EQ(plan.visible[r], 0);
  }
  EXPECT_EQ(static_cast<int64_t>(tile_of.size()), (in.num_rows - padding) * in.group_size);

  // Per (tile, KV head), the units' ranges partition [0, tile.tokens) (or are one empty unit).
  std::map<std::pair<int32_t, int32_t>, std::vector<const PlanUnit*>> units_of;
  for (const PlanUnit& u : plan.units) units_of[{u.tile, u.kv_head}].push_back(&u);
  ASSERT_EQ(units_of.size(), plan.tiles.size() * in.num_kv_heads);
  std::vector<std::pair<int64_t, int64_t>> partial_ranges;
  for (auto& [key, units] : units_of) {
    const PlanTile& tile = plan.tiles[key.first];
    std::sort(units.begin(), units.end(),
              [](const PlanUnit* a, const PlanUnit* b) { return a->token_begin < b->token_begin; });
    int64_t covered = 0;
    for (size_t c = 0; c < units.size(); ++c) {
      EXPECT_EQ(units[c]->token_begin, covered);
      EXPECT_LE(units[c]->token_end, std::max<int64_t>(tile.tokens, 0));
      if (units.size() > 1) {
        EXPECT_EQ(units[c]->token_begin % in.dcp.block_size, 0) << "chunks are block-aligned";
        EXPECT_EQ(units[c]->chunk, static_cast<int32_t>(c));
        EXPECT_EQ(units[c]->merge, units[0]->merge);
        EXPECT_GT(units[c]->token_end, units[c]->token_begin);
      } else {
        EXPECT_EQ(units[c]->merge, -1);
      }
      covered = units[c]->token_end;
    }
    EXPECT_EQ(covered, tile.tokens);
    if (units.size() > 1) {
      const PlanMerge& m = plan.merges[units[0]->merge];
      EXPECT_EQ(m.tile, key.first);
      EXPECT_EQ(m.kv_head, key.second);
      EXPECT_EQ(m.num_chunks, static_cast<int32_t>(units.size()));
      const int64_t nq = tile.num_queries();
      partial_ranges.emplace_back(m.out_offset, m.out_offset + m.num_chunks * nq * in.head_dim);
      partial_ranges.emplace_back(m.lse_offset, m.lse_offset + m.num_chunks * nq);
    }
  }
  // Partial buffers of different merges never overlap and fit the allocation.
  std::sort(partial_ranges.begin(), partial_ranges.end());
  for (size_t i = 0; i < partial_ranges.size(); ++i) {
    EXPECT_LE(partial_ranges[i].second, plan.partial_floats);
    if (i > 0) {
      EXPECT_LE(partial_ranges[i - 1].second, partial_ranges[i].first);
    }
  }

  // Threads get contiguous, ordered runs covering every unit once.
  ASSERT_EQ(static_cast<int32_t>(plan.thread_begin.size()), in.threads + 1);
  EXPECT_EQ(plan.thread_begin.front(), 0);
  EXPECT_EQ(plan.thread_begin.back(), static_cast<int64_t>(plan.units.size()));
  for (int32_t t = 0; t < in.threads; ++t) {
    EXPECT_LE(plan.thread_begin[t], plan.thread_begin[t + 1]);
  }
}

TEST(AttentionPlanTest, RandomBatchesSatisfyTheContract) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t b = std::vector<int32_t>{1, 4, 16}[rng() % 3];
    const int32_t n = 1 + static_cast<int32_t>(rng() % 4);
    const DcpGeometry dcp{b, n, b};
    Rows rows;
    const int requests = 1 + static_cast<int>(rng() % 5);
    for (int r = 0; r < requests; ++r) {
      const int row_count = static_cast<int>(rng() % 7);
      for (int i = 0; i < row_count; ++i) {
        rows.request.push_back(r);
        rows.position.push_back(static_cast<int64_t>(rng() % 700));
      }
    }
    if (rng() % 3 == 0) {  // a padding row, whose request index is garbage
      rows.request.push_back(-5);
      rows.position.push_back(-1);
    }
    const AttentionPlanInput in = Input(
        rows, dcp, static_cast<int32_t>(rng() % n), 1 + static_cast<int32_t>(rng() % 3),
        std::vector<int32_t>{1, 2, 4, 7, 20, 33}[rng() % 6], 1 + static_cast<int32_t>(rng() % 4));
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    CheckPlan(in, PlanAttention(in));
  }
}

TEST(AttentionPlanTest, DecodeRowsGetOneTileEachWithAllTheirGqaHeads) {
  Rows rows{{0, 1, 2}, {100, 5, 40}};
  const AttentionPlan plan = PlanAttention(Input(rows, DcpGeometry{16, 1, 1}, 0, 2, 4, 1));
  ASSERT_EQ(plan.tiles.size(), 3u);
  for (const PlanTile& t : plan.tiles) {
    EXPECT_EQ(t.num_rows, 1);
    EXPECT_EQ(t.head_count, 4);
  }
  EXPECT_TRUE(plan.merges.empty());
}

TEST(AttentionPlanTest, PrefillRowsOfARequestShareTiles) {
  Rows rows;
  for (int64_t p = 30; p < 40; ++p) {  // ten rows of one request, group of 4 heads
    rows.request.push_back(0);
    rows.position.push_back(p);
  }
  const AttentionPlan plan = PlanAttention(Input(rows, DcpGeometry{16, 1, 1}, 0, 1, 4, 1));
  // 16 queries per tile / 4 heads = 4 rows per tile: tiles of 4, 4 and 2 rows.
  ASSERT_EQ(plan.tiles.size(), 3u);
  EXPECT_EQ(plan.tiles[0].num_rows, 4);
  EXPECT_EQ(plan.tiles[2].num_rows, 2);
  EXPECT_EQ(plan.tiles[0].tokens, 34);  // the tile's last row, position 33, sees 34 tokens
}

TEST(AttentionPlanTest, OneLongRequestIsSplitOnlyWhenThreadsCanShareIt) {
  Rows rows{{0}, {4095}};
  AttentionPlanInput in = Input(rows, DcpGeometry{16, 1, 1}, 0, 1, 4, 1);
  in.min_split_tokens = 256;
  EXPECT_TRUE(PlanAttention(in).merges.empty()) << "one thread: nothing to share";
  in.threads = 2;
  const AttentionPlan plan = PlanAttention(in);
  CheckPlan(in, plan);
  ASSERT_EQ(plan.merges.size(), 1u);
  EXPECT_GE(plan.merges[0].num_chunks, 2);
  for (const PlanUnit& u : plan.units) {
    if (u.token_end != 4096) {
      EXPECT_GE(u.token_end - u.token_begin, in.min_split_tokens);
    }
  }
}

TEST(AttentionPlanTest, ManyEqualRequestsAreNotSplitAndBalanceAcrossThreads) {
  Rows rows;
  for (int32_t r = 0; r < 16; ++r) {
    rows.request.push_back(r);
    rows.position.push_back(4095);
  }
  const AttentionPlanInput in = Input(rows, DcpGeometry{16, 1, 1}, 0, 8, 4, 2);
  const AttentionPlan plan = PlanAttention(in);
  CheckPlan(in, plan);
  EXPECT_TRUE(plan.merges.empty());
  EXPECT_EQ(plan.thread_begin[1], 64);  // 128 equal units: half each
}

TEST(AttentionPlanTest, ThreadCostsDifferByAtMostOneUnit) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    Rows rows;
    for (int32_t r = 0; r < 12; ++r) {
      rows.request.push_back(r);
      rows.position.push_back(static_cast<int64_t>(rng() % 5000));
    }
    const int32_t threads = 2 + static_cast<int32_t>(rng() % 3);
    AttentionPlanInput in = Input(rows, DcpGeometry{16, 2, 1}, 1, 2, 4, threads);
    in.min_split_tokens = 128;
    const AttentionPlan plan = PlanAttention(in);
    int64_t total = 0, largest = 0;
    for (const PlanUnit& u : plan.units) {
      total += UnitCost(plan, u);
      largest = std::max(largest, UnitCost(plan, u));
    }
    for (int32_t t = 0; t < threads; ++t) {
      int64_t cost = 0;
      for (int64_t u = plan.thread_begin[t]; u < plan.thread_begin[t + 1]; ++u) {
        cost += UnitCost(plan, plan.units[u]);
      }
      EXPECT_LE(cost, total / threads + largest) << "thread " << t << " of " << threads;
    }
  }
}

}  // namespace
}  // namespace tandem::attention_cpu
