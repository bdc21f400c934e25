#include "attention/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "attention/cpu/attention_kernel.h"
#include "attention/cpu/attention_plan.h"
#include "attention/cpu/cpu_isa.h"
#include "attention/lse_merge.h"
#include "common/parallel_for.h"

namespace tandem {
namespace {

using attention_cpu::AttentionPlan;
using attention_cpu::KernelTable;
using attention_cpu::PlanMerge;
using attention_cpu::PlanTile;
using attention_cpu::PlanUnit;
using attention_cpu::TileArgs;

// Per-thread kernel scratch, kept across calls so steady-state decode allocates nothing here.
std::vector<float>& ThreadScratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < floats) scratch.resize(floats);
  return scratch;
}

struct CallContext {
  const KvPoolView& pool;
  int32_t layer;
  const AttentionRows& rows;
  const float* q;
  int32_t num_q_heads;
  float scale;
  float* out;
  float* lse;
  const AttentionPlan& plan;
  const KernelTable& kernels;
  float* partials;
};

void RunUnit(const CallContext& c, const PlanUnit& u, float* scratch) {
  const PoolGeometry& g = c.pool.geometry;
  const PlanTile& t = c.plan.tiles[u.tile];
  const int32_t group = c.num_q_heads / g.num_kv_heads;
  const int32_t d = g.head_dim;
  const int32_t nq = t.num_queries();
  const PlanMerge* merge = u.merge >= 0 ? &c.plan.merges[u.merge] : nullptr;

  const float* q[attention_cpu::kMaxTileQueries];
  int64_t visible[attention_cpu::kMaxTileQueries];
  float* out[attention_cpu::kMaxTileQueries];
  float* lse[attention_cpu::kMaxTileQueries];
  for (int32_t i = 0; i < nq; ++i) {
    const int64_t row = c.plan.order[t.first + i / t.head_count];
    const int64_t head = int64_t{u.kv_head} * group + t.head_begin + i % t.head_count;
    const int64_t item = row * c.num_q_heads + head;  // (row, head) in the caller's layout
    q[i] = c.q + item * d;
    visible[i] = c.plan.visible[row];
    if (merge == nullptr) {
      out[i] = c.out + item * d;
      lse[i] = c.lse + item;
    } else {
      out[i] = c.partials + merge->out_offset + (int64_t{u.chunk} * nq + i) * d;
      lse[i] = c.partials + merge->lse_offset + int64_t{u.chunk} * nq + i;
    }
  }

  TileArgs args;
  args.kv_base = static_cast<const std::byte*>(c.pool.base) +
                 KvByteOffset(g, /*block=*/0, u.kv_head, c.layer, /*kv=*/0, /*offset_in_block=*/0);
  args.block_bytes = g.block_bytes();
  args.block_ids = c.rows.tables.table(t.request);
  args.block_size = g.block_size;
  args.head_dim = d;
  args.dtype = g.dtype;
  args.token_begin = u.token_begin;
  args.token_end = u.token_end;
  args.num_queries = nq;
  args.q = q;
  args.visible = visible;
  args.scale = c.scale;
  args.out = out;
  args.lse = lse;
  args.scratch = scratch;
  c.kernels.attend_tile(args);
}

// Merges the chunks of one split (tile, KV head) into the caller's output, one row at a time:
// a row's heads of this tile are consecutive both in the partials and in the output.
void RunMerge(const CallContext& c, const PlanMerge& m, std::vector<const float*>& outs,
              std::vector<const float*>& lses) {
  const PoolGeometry& g = c.pool.geometry;
  const PlanTile& t = c.plan.tiles[m.tile];
  const int32_t group = c.num_q_heads / g.num_kv_heads;
  const int32_t d = g.head_dim;
  const int64_t nq = t.num_queries();
  outs.resize(m.num_chunks);
  lses.resize(m.num_chunks);
  for (int32_t r = 0; r < t.num_rows; ++r) {
    for (int32_t k = 0; k < m.num_chunks; ++k) {
      const int64_t query = k * nq + int64_t{r} * t.head_count;
      outs[k] = c.partials + m.out_offset + query * d;
      lses[k] = c.partials + m.lse_offset + query;
    }
    const int64_t row = c.plan.order[t.first + r];
    const int64_t item = row * c.num_q_heads + int64_t{m.kv_head} * group + t.head_begin;
    MergeAttentionPartials(m.num_chunks, outs.data(), lses.data(), t.head_count, d,
                           c.out + item * d, c.lse + item);
  }
}

}  // namespace

void PagedAttention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                    const float* q, int32_t num_q_heads, float scale, float* out, float* lse) {
  if (rows.num_rows <= 0) return;
  const PoolGeometry& g = pool.geometry;
  const int threads = ThreadsForThisThread();
  attention_cpu::AttentionPlanInput in;
  in.num_rows = rows.num_rows;
  in.request = rows.request;
  in.position = rows.position;
  in.dcp = rows.dcp;
  in.dcp_rank = rows.dcp_rank;
  in.num_kv_heads = g.num_kv_heads;
  in.group_size = num_q_heads / g.num_kv_heads;
  in.head_dim = g.head_dim;
  in.threads = threads;
  in.max_tile_queries = attention_cpu::kMaxTileQueries;
  const AttentionPlan plan = attention_cpu::PlanAttention(in);

  const int64_t d = g.head_dim;
  for (int64_t row : plan.padding) {
    std::fill(out + row * num_q_heads * d, out + (row + 1) * num_q_heads * d, 0.f);
    std::fill(lse + row * num_q_heads, lse + (row + 1) * num_q_heads, -INFINITY);
  }
  std::vector<float> partials(plan.partial_floats);
  const CallContext ctx{
      pool,           layer, rows, q,    num_q_heads,
      scale,          out,   lse,  plan, attention_cpu::SelectKernels(ActiveCpuIsa(), g.head_dim),
      partials.data()};
  const int64_t scratch_floats =
      attention_cpu::TileScratchFloats(plan.max_tile_queries, g.head_dim);
  ParallelFor(threads, 1, [&](int64_t begin, int64_t end) {
    float* scratch = ThreadScratch(scratch_floats).data();
    for (int64_t th = begin; th < end; ++th) {
      for (int64_t u = plan.thread_begin[th]; u < plan.thread_begin[th + 1]; ++u) {
        RunUnit(ctx, plan.units[u], scratch);
      }
    }
  });
  if (plan.merges.empty()) return;
  ParallelFor(static_cast<int64_t>(plan.merges.size()), 4, [&](int64_t begin, int64_t end) {
    std::vector<const float*> outs, lses;
    for (int64_t m = begin; m < end; ++m) RunMerge(ctx, plan.merges[m], outs, lses);
  });
}

}  // namespace tandem
