#include "attention/cpu/attention_plan.h"

#include <algorithm>

namespace tandem::attention_cpu {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A token costs one K and one V row read plus, per query, a dot product and an axpy; the read
// weighs about as much as two queries' arithmetic. The +1 token charges each unit's fixed setup.
int64_t Cost(int64_t tokens, int32_t queries) { return (tokens + 1) * (queries + 2); }

void FormTiles(const AttentionPlanInput& in, AttentionPlan& plan) {
  const int32_t heads_per_tile = std::min(in.group_size, in.max_tile_queries);
  const int32_t head_groups = static_cast<int32_t>(CeilDiv(in.group_size, heads_per_tile));
  const int32_t rows_per_tile = std::max(1, in.max_tile_queries / heads_per_tile);
  const int64_t rows_in_tiles = static_cast<int64_t>(plan.order.size());
  for (int64_t run = 0; run < rows_in_tiles;) {
    const int32_t req = in.request[plan.order[run]];
    int64_t run_end = run;
    while (run_end < rows_in_tiles && in.request[plan.order[run_end]] == req) ++run_end;
    for (int64_t first = run; first < run_end; first += rows_per_tile) {
      const int32_t rows = static_cast<int32_t>(std::min<int64_t>(rows_per_tile, run_end - first));
      // Sorted by position, so the tile's last row sees the most tokens.
      const int64_t tokens = plan.visible[plan.order[first + rows - 1]];
      for (int32_t g = 0; g < head_groups; ++g) {
        // Spread the heads evenly over the groups: group g gets [g·G/n, (g+1)·G/n).
        const int32_t hb = static_cast<int32_t>(int64_t{g} * in.group_size / head_groups);
        const int32_t he = static_cast<int32_t>(int64_t{g + 1} * in.group_size / head_groups);
        plan.tiles.push_back(PlanTile{req, first, rows, hb, he - hb, tokens});
        plan.max_tile_queries = std::max(plan.max_tile_queries, rows * (he - hb));
      }
    }
    run = run_end;
  }
}

void FormUnits(const AttentionPlanInput& in, AttentionPlan& plan) {
  int64_t total = 0;
  for (const PlanTile& t : plan.tiles) total += Cost(t.tokens, t.num_queries()) * in.num_kv_heads;
  // Aim for a few units per thread so contiguous runs of units balance; 0 disables splitting.
  const int64_t target = in.threads > 1 ? CeilDiv(total, int64_t{in.threads} * 4) : 0;
  const int64_t block = in.dcp.block_size;
  for (int32_t ti = 0; ti < static_cast<int32_t>(plan.tiles.size()); ++ti) {
    const PlanTile& t = plan.tiles[ti];
    const int32_t nq = t.num_queries();
    int64_t chunks = 1;
    if (target > 0) {
      chunks = std::min(CeilDiv(Cost(t.tokens, nq), target), t.tokens / in.min_split_tokens);
      chunks = std::max<int64_t>(chunks, 1);
    }
    const int64_t chunk_tokens = chunks > 1 ? CeilDiv(CeilDiv(t.tokens, chunks), block) * block
                                            : std::max<int64_t>(t.tokens, 1);
    chunks = std::max<int64_t>(1, CeilDiv(t.tokens, chunk_tokens));
    for (int32_t kvh = 0; kvh < in.num_kv_heads; ++kvh) {
      int32_t merge = -1;
      if (chunks > 1) {
        merge = static_cast<int32_t>(plan.merges.size());
        const int64_t outs = chunks * nq * int64_t{in.head_dim};
        plan.merges.push_back(PlanMerge{ti, kvh, static_cast<int32_t>(chunks), plan.partial_floats,
                                        plan.partial_floats + outs});
        plan.partial_floats += outs + chunks * nq;
      }
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t begin = c * chunk_tokens;
        const int64_t end = std::min(t.tokens, begin + chunk_tokens);
        plan.units.push_back(PlanUnit{ti, kvh, begin, end, merge, static_cast<int32_t>(c)});
      }
    }
  }
}

void AssignThreads(int32_t threads, AttentionPlan& plan) {
  int64_t total = 0;
  for (const PlanUnit& u : plan.units) total += UnitCost(plan, u);
  plan.thread_begin.assign(threads + 1, static_cast<int64_t>(plan.units.size()));
  plan.thread_begin[0] = 0;
  // Unit u belongs to the thread whose equal share of the total cost holds u's midpoint; the
  // owner is non-decreasing in u, so every thread gets one contiguous run.
  int64_t prefix = 0;
  int32_t next_thread = 1;
  for (int64_t u = 0; u < static_cast<int64_t>(plan.units.size()); ++u) {
    const int64_t cost = UnitCost(plan, plan.units[u]);
    const double mid = static_cast<double>(prefix) + 0.5 * static_cast<double>(cost);
    const int32_t owner = std::min<int32_t>(
        threads - 1, static_cast<int32_t>(mid * threads / static_cast<double>(total)));
    while (next_thread <= owner) plan.thread_begin[next_thread++] = u;
    prefix += cost;
  }
}

}  // namespace

int64_t UnitCost(const AttentionPlan& plan, const PlanUnit& unit) {
  return Cost(unit.token_end - unit.token_begin, plan.tiles[unit.tile].num_queries());
}

AttentionPlan PlanAttention(const AttentionPlanInput& in) {
  AttentionPlan plan;
  plan.visible.resize(in.num_rows);
  for (int64_t i = 0; i < in.num_rows; ++i) {
    if (in.position[i] < 0) {  // padding row: no keys, and its request index is not to be read
      plan.visible[i] = 0;
      plan.padding.push_back(i);
    } else {
      plan.visible[i] = LocalLen(in.dcp, in.dcp_rank, in.position[i] + 1);
      plan.order.push_back(i);
    }
  }
  std::stable_sort(plan.order.begin(), plan.order.end(), [&](int64_t a, int64_t b) {
    if (in.request[a] != in.request[b]) return in.request[a] < in.request[b];
    return in.position[a] < in.position[b];
  });
  FormTiles(in, plan);
  FormUnits(in, plan);
  AssignThreads(in.threads, plan);
  return plan;
}

}  // namespace tandem::attention_cpu
