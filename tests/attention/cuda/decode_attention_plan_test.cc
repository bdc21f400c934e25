// The launch planning and index math of the GQA split-KV decode kernel
// (attention/cuda/decode_attention_plan.h), on the CPU:
// * lane layout: every element of a K/V row is loaded by exactly one (lane, vector) of a token
//   group, within the kernel's register arrays; groups tile the CTA's threads;
// * key coverage: over splits × steps × token slots × groups every local key of every row is
//   read exactly once (1 token, block boundaries, lengths not a multiple of the step or split);
// * GQA: every (row, query head) is served by exactly one (CTA, pass, slot), whose KV head is
//   query head / group;
// * the split planner's guarantees and the shared-memory size limit;
// * a CPU emulation of the kernel — the same index functions, the same per-group online softmax,
//   the same merge tree (xor partners inside a warp, then warps, then splits by lse_merge.h) —
//   reading real DCP-sharded pools, against the CPU PagedAttention of the same pools.
//   Tolerance: relative L2 error of the output and |Δlse| / max(1, |lse|) at most 2e-5 (fp32
//   sums over ≤ a few thousand keys in a different order: ~1e-6 observed; a wrong token, head or
//   split boundary gives errors of order 1), and exact zeros / −inf where a row has no keys.
#include "attention/cuda/decode_attention_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "attention/cuda/attention_launch_plan.h"
#include "attention/lse_merge.h"
#include "gtest/gtest.h"
#include "tests/attention/cpu/attention_harness.h"

namespace tandem::gpu {
namespace {

using tandem::testing::AddDecodeRequest;
using tandem::testing::AddPaddingRow;
using tandem::testing::AddPrefillRequest;
using tandem::testing::AttentionCase;
using tandem::testing::AttentionData;

constexpr int32_t kElemBytes[] = {4, 2};

std::vector<int32_t> SupportedHeadDims(int32_t elem_bytes) {
  std::vector<int32_t> dims;
  for (int32_t d = 1; d <= kMaxHeadDim; ++d) {
    if (DecodeKernelSupports(d, elem_bytes)) dims.push_back(d);
  }
  return dims;
}

TEST(DecodeAttentionPlanTest, ParsesTheKernelChoice) {
  EXPECT_EQ(*ParseCudaAttentionKernel(""), CudaAttentionKernel::kPerHead);
  EXPECT_EQ(*ParseCudaAttentionKernel("per_head"), CudaAttentionKernel::kPerHead);
  EXPECT_EQ(*ParseCudaAttentionKernel("gqa_split_kv"), CudaAttentionKernel::kGqaSplitKv);
  EXPECT_EQ(*ParseCudaAttentionKernel("flashinfer"), CudaAttentionKernel::kFlashInfer);
  const absl::StatusOr<CudaAttentionKernel> bad = ParseCudaAttentionKernel("fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(
                "TANDEM_CUDA_ATTENTION=fast is not one of per_head, gqa_split_kv, flashinfer"),
            std::string::npos)
      << bad.status();
}

TEST(DecodeAttentionPlanTest, SupportsWholeVectorRowsOnly) {
  EXPECT_TRUE(DecodeKernelSupports(64, 2));
  EXPECT_TRUE(DecodeKernelSupports(40, 2));  // 80 bytes = 5 vectors
  EXPECT_TRUE(DecodeKernelSupports(4, 4));
  EXPECT_TRUE(DecodeKernelSupports(256, 4));
  EXPECT_FALSE(DecodeKernelSupports(36, 2));  // 72 bytes
  EXPECT_FALSE(DecodeKernelSupports(6, 4));
  EXPECT_FALSE(DecodeKernelSupports(264, 2));
  EXPECT_FALSE(DecodeKernelSupports(0, 2));
}

// Every element of a row belongs to exactly one (lane in group, vector) with the vector inside
// the kernel's register array (kDecodeDimsPerLane / vec_elems vectors).
TEST(DecodeAttentionPlanTest, LanesCoverEveryElementOfARowOnce) {
  for (int32_t eb : kElemBytes) {
    for (int32_t d : SupportedHeadDims(eb)) {
      SCOPED_TRACE("elem_bytes " + std::to_string(eb) + " head_dim " + std::to_string(d));
      const DecodeLaneShape s = DecodeLaneShapeFor(d, eb);
      ASSERT_EQ(s.vec_elems * eb, kDecodeVecBytes);
      ASSERT_EQ(s.chunks * s.vec_elems, d);
      ASSERT_GE(s.lanes_per_token, 1);
      ASSERT_LE(s.lanes_per_token, 32);
      ASSERT_EQ(s.lanes_per_token & (s.lanes_per_token - 1), 0) << "not a power of two";
      ASSERT_LE(s.vecs_per_lane * s.vec_elems, kDecodeDimsPerLane);
      ASSERT_EQ(s.groups_per_warp * s.lanes_per_token, 32);
      ASSERT_EQ(s.tokens_per_step, s.groups_per_cta * kDecodeTokensPerGroup);
      std::vector<int> seen(d, 0);
      for (int32_t lane = 0; lane < s.lanes_per_token; ++lane) {
        // The kernel's loop bound is the register array size, not vecs_per_lane.
        for (int32_t v = 0; v < kDecodeDimsPerLane / s.vec_elems; ++v) {
          const int32_t c = DecodeChunkOf(s, lane, v);
          if (c >= s.chunks) continue;
          ASSERT_LT(v, s.vecs_per_lane);
          for (int32_t e = 0; e < s.vec_elems; ++e) ++seen[c * s.vec_elems + e];
        }
      }
      for (int32_t x = 0; x < d; ++x) ASSERT_EQ(seen[x], 1) << "element " << x;
    }
  }
}

// The CTA's threads form groups_per_cta groups of lanes_per_token lanes inside one warp each;
// xor partners below lanes_per_token stay in the group, those at or above keep the lane index.
TEST(DecodeAttentionPlanTest, GroupsTileTheThreadsAndShufflesStayInPlace) {
  for (int32_t eb : kElemBytes) {
    for (int32_t d : SupportedHeadDims(eb)) {
      const DecodeLaneShape s = DecodeLaneShapeFor(d, eb);
      std::set<std::pair<int32_t, int32_t>> seen;
      for (int32_t t = 0; t < kDecodeThreads; ++t) {
        const int32_t g = DecodeGroupOf(s, t);
        const int32_t l = DecodeLaneInGroup(s, t);
        ASSERT_GE(g, 0);
        ASSERT_LT(g, s.groups_per_cta);
        ASSERT_LT(l, s.lanes_per_token);
        ASSERT_TRUE(seen.insert({g, l}).second) << "thread " << t;
        const int32_t lane = t % 32;
        for (int32_t off = 1; off < 32; off *= 2) {
          const int32_t partner = (t / 32) * 32 + (lane ^ off);
          if (off < s.lanes_per_token) {
            ASSERT_EQ(DecodeGroupOf(s, partner), g) << "thread " << t << " off " << off;
          } else {
            ASSERT_EQ(DecodeLaneInGroup(s, partner), l) << "thread " << t << " off " << off;
          }
        }
      }
      ASSERT_EQ(static_cast<int32_t>(seen.size()), kDecodeThreads);
    }
  }
}

// Over splits × steps × token slots × groups, each of the visible tokens is read exactly once,
// and no read is outside [split begin, split end).
void ExpectKeysCoveredOnce(const DecodeLaneShape& s, const AttentionSplit& split, int64_t visible) {
  ASSERT_GE(int64_t{split.num_splits} * split.tokens_per_split, visible);
  std::vector<int> seen(visible, 0);
  for (int32_t sp = 0; sp < split.num_splits; ++sp) {
    const int64_t begin = DecodeSplitBegin(sp, split.tokens_per_split);
    const int64_t end = DecodeSplitEnd(sp, split.tokens_per_split, visible);
    const int64_t steps = DecodeSteps(s, end - begin);
    if (end <= begin) {
      ASSERT_EQ(steps, 0);
      continue;
    }
    for (int64_t step = 0; step < steps; ++step) {
      for (int32_t k = 0; k < kDecodeTokensPerGroup; ++k) {
        for (int32_t g = 0; g < s.groups_per_cta; ++g) {
          const int64_t t = DecodeTokenOf(s, begin, step, k, g);
          ASSERT_GE(t, begin);
          if (t >= end) continue;
          ++seen[t];
        }
      }
    }
  }
  for (int64_t t = 0; t < visible; ++t) {
    ASSERT_EQ(seen[t], 1) << "token " << t << " of " << visible << " (splits " << split.num_splits
                          << " x " << split.tokens_per_split << ")";
  }
}

TEST(DecodeAttentionPlanTest, EveryKeyIsReadOnceAcrossSplitsAndSteps) {
  const std::vector<int64_t> lengths = {0,    1,    2,    15,   16,   17,    31,   32,  33,
                                        127,  128,  129,  255,  256,  257,   511,  512, 513,
                                        1000, 1024, 4095, 4096, 4097, 32768, 32769};
  for (int32_t eb : kElemBytes) {
    for (int32_t d : {4, 8, 40, 64, 128, 256}) {
      if (!DecodeKernelSupports(d, eb)) continue;
      const DecodeLaneShape s = DecodeLaneShapeFor(d, eb);
      for (int64_t visible : lengths) {
        for (int64_t ctas : {1, 3, 32, 512, 768, 4096}) {
          SCOPED_TRACE("eb " + std::to_string(eb) + " d " + std::to_string(d) + " visible " +
                       std::to_string(visible) + " ctas " + std::to_string(ctas));
          ExpectKeysCoveredOnce(s, PlanDecodeSplit(ctas, visible, s.tokens_per_step), visible);
          if (HasFatalFailure()) return;
        }
        // Forced splits of odd sizes (the cuda test uses such splits too).
        for (int64_t tps : {1, 7, 100, 333}) {
          if (tps * kMaxSplits < visible) continue;
          const AttentionSplit forced{
              static_cast<int32_t>(std::max<int64_t>(1, (visible + tps - 1) / tps)), tps};
          ExpectKeysCoveredOnce(s, forced, visible);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(DecodeAttentionPlanTest, SplitPlannerGuaranteesAndIssueShapes) {
  for (int32_t step : {32, 64, 128, 512}) {
    for (int64_t ctas : {0, 1, 2, 24, 32, 100, 512, 768, 1023, 1024, 5000}) {
      for (int64_t visible : {0, 1, 100, 255, 256, 257, 1000, 1024, 4096, 5000, 32768, 100000}) {
        const AttentionSplit s = PlanDecodeSplit(ctas, visible, step);
        ASSERT_GE(s.num_splits, 1);
        ASSERT_LE(s.num_splits, kMaxSplits);
        ASSERT_GE(s.tokens_per_split, 1);
        ASSERT_GE(int64_t{s.num_splits} * s.tokens_per_split, visible);
        if (s.num_splits > 1) {
          ASSERT_EQ(s.tokens_per_split % step, 0) << "whole steps per split";
          ASSERT_GE(s.tokens_per_split, kDecodeMinTokensPerSplit);
          ASSERT_LT(int64_t{s.num_splits - 1} * s.tokens_per_split, visible)
              << "the last split of the longest row is not empty";
          ASSERT_LT(ctas, kDecodeTargetCtas) << "splits only when CTAs are too few";
        }
      }
    }
  }
  // The issue's shapes (bf16, head_dim 128: 32 tokens per step).
  const int32_t step = DecodeLaneShapeFor(128, 2).tokens_per_step;
  EXPECT_EQ(step, 32);
  // 64 sequences × 8 KV heads at 4096: 512 CTAs → 2 splits.
  EXPECT_EQ(PlanDecodeSplit(64 * 8, 4096, step).num_splits, 2);
  // 4 sequences × 8 KV heads at 32768: 32 CTAs → 32 splits of 1024.
  const AttentionSplit long_keys = PlanDecodeSplit(4 * 8, 32768, step);
  EXPECT_EQ(long_keys.num_splits, 32);
  EXPECT_EQ(long_keys.tokens_per_split, 1024);
  // SmolLM2: 256 × 3 KV heads at 1024: 768 CTAs → 2 splits.
  EXPECT_EQ(PlanDecodeSplit(256 * 3, 1024, DecodeLaneShapeFor(64, 2).tokens_per_step).num_splits,
            2);
}

TEST(DecodeAttentionPlanTest, GqaHeadsAreServedOnceByTheirKvHead) {
  for (int32_t hkv : {1, 2, 3, 8}) {
    for (int32_t group : {1, 2, 3, 4, 5, 8, 9, 16}) {
      const int64_t rows = 3;
      const int32_t hq = hkv * group;
      const int32_t per_pass = DecodeHeadsPerPass(group);
      ASSERT_LE(per_pass, kDecodeMaxHeads);
      ASSERT_GE(per_pass, std::min(group, kDecodeMaxHeads));
      std::vector<int> seen(rows * hq, 0);
      for (int64_t cta = 0; cta < rows * hkv; ++cta) {
        const int64_t row = DecodeRowOf(cta, hkv);
        const int32_t kv = DecodeKvHeadOf(cta, hkv);
        for (int32_t pass = 0; pass < DecodeHeadPasses(group, per_pass); ++pass) {
          const int32_t heads = DecodeHeadsInPass(group, per_pass, pass);
          ASSERT_GE(heads, 1);
          for (int32_t h = 0; h < heads; ++h) {
            const int32_t qh = DecodeQueryHead(kv, group, per_pass, pass, h);
            ASSERT_EQ(qh / group, kv) << "query head " << qh << " uses KV head " << kv;
            ++seen[row * hq + qh];
          }
        }
      }
      for (int64_t i = 0; i < rows * hq; ++i) ASSERT_EQ(seen[i], 1) << "item " << i;
    }
  }
}

TEST(DecodeAttentionPlanTest, PlanFitsStaticSharedMemoryAndRejectsUnsupportedShapes) {
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (int32_t d : SupportedHeadDims(KvDTypeBytes(dtype))) {
      for (int32_t group : {1, 3, 4, 8, 16}) {
        const PoolGeometry g{2, 1, 16, d, dtype};
        absl::StatusOr<DecodeAttentionPlan> p = PlanDecodeAttention(5, 2 * group, g, 3000);
        ASSERT_TRUE(p.ok()) << p.status();
        ASSERT_LE(p->shared_bytes, 48 * 1024) << "no opt-in attribute is set";
        ASSERT_EQ(p->grid_x, 10);
        ASSERT_EQ(p->grid_y, p->split.num_splits);
      }
    }
  }
  absl::StatusOr<DecodeAttentionPlan> p =
      PlanDecodeAttention(1, 4, PoolGeometry{2, 1, 16, 36, KvDType::kBF16}, 10);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("head_dim 36 of 2-byte elements"), std::string::npos)
      << p.status();
  p = PlanDecodeAttention(1, 3, PoolGeometry{2, 1, 16, 64, KvDType::kBF16}, 10);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("num_q_heads=3 is not a positive multiple"),
            std::string::npos)
      << p.status();
  p = PlanDecodeAttentionWithSplit(1, 4, PoolGeometry{2, 1, 16, 64, KvDType::kBF16},
                                   AttentionSplit{kMaxSplits + 1, 4});
  ASSERT_FALSE(p.ok());
}

// ---- CPU emulation of the kernel ----

float LoadElem(const void* pool, KvDType dtype, int64_t element) {
  switch (dtype) {
    case KvDType::kF32:
      return static_cast<const float*>(pool)[element];
    case KvDType::kF16:
      return HalfToFloat(static_cast<const uint16_t*>(pool)[element]);
    case KvDType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(pool)[element]);
  }
  return NAN;
}

struct Softmax {
  float m = -INFINITY;
  float l = 0.f;
  std::vector<float> acc;
};

// The kernel's merge of a group with its xor partner (and of the warps): exact LSE weights.
Softmax MergeTwo(const Softmax& a, const Softmax& b) {
  Softmax r;
  r.m = std::max(a.m, b.m);
  const float wa = a.m == -INFINITY ? 0.f : std::exp(a.m - r.m);
  const float wb = b.m == -INFINITY ? 0.f : std::exp(b.m - r.m);
  r.l = a.l * wa + b.l * wb;
  r.acc.resize(a.acc.size());
  for (size_t i = 0; i < a.acc.size(); ++i) r.acc[i] = a.acc[i] * wa + b.acc[i] * wb;
  return r;
}

// The kernel (decode_attention.cu) step by step on the CPU, with the given split, including the
// final LSE merge of the splits.
void EmulateDecodeKernel(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                         const float* q, int32_t hq, float scale, const AttentionSplit& split,
                         float* out, float* lse) {
  const PoolGeometry& g = pool.geometry;
  const int32_t d = g.head_dim;
  const int32_t hkv = g.num_kv_heads;
  const int32_t group = hq / hkv;
  const int64_t items = rows.num_rows * hq;
  const DecodeLaneShape s = DecodeLaneShapeFor(d, static_cast<int32_t>(g.elem_bytes()));
  const int32_t per_pass = DecodeHeadsPerPass(group);
  std::vector<float> part_out(int64_t{split.num_splits} * items * d, NAN);
  std::vector<float> part_lse(int64_t{split.num_splits} * items, NAN);
  for (int64_t cta = 0; cta < rows.num_rows * hkv; ++cta) {
    const int64_t row = DecodeRowOf(cta, hkv);
    const int32_t kv = DecodeKvHeadOf(cta, hkv);
    const int64_t pos = rows.position[row];
    const int64_t visible = pos < 0 ? 0 : LocalLen(rows.dcp, rows.dcp_rank, pos + 1);
    for (int32_t sp = 0; sp < split.num_splits; ++sp) {
      const int64_t begin = DecodeSplitBegin(sp, split.tokens_per_split);
      const int64_t end = DecodeSplitEnd(sp, split.tokens_per_split, visible);
      const int32_t* table = begin < end ? rows.tables.table(rows.request[row]) : nullptr;
      for (int32_t pass = 0; pass < DecodeHeadPasses(group, per_pass); ++pass) {
        const int32_t heads = DecodeHeadsInPass(group, per_pass, pass);
        const int32_t head0 = DecodeQueryHead(kv, group, per_pass, pass, 0);
        // [group][head]
        std::vector<std::vector<Softmax>> st(s.groups_per_cta, std::vector<Softmax>(heads));
        for (auto& gs : st) {
          for (Softmax& x : gs) x.acc.assign(d, 0.f);
        }
        for (int64_t step = 0; step < DecodeSteps(s, end - begin); ++step) {
          for (int32_t k = 0; k < kDecodeTokensPerGroup; ++k) {
            for (int32_t grp = 0; grp < s.groups_per_cta; ++grp) {
              const int64_t t = DecodeTokenOf(s, begin, step, k, grp);
              if (t >= end) continue;
              const int64_t slot = SlotOfLocal(rows.dcp, t, table);
              const int64_t k_at = KvSlotElementIndex(g, slot, kv, layer, 0);
              const int64_t v_at = KvSlotElementIndex(g, slot, kv, layer, 1);
              for (int32_t h = 0; h < heads; ++h) {
                const float* qh = q + (row * hq + head0 + h) * d;
                float dot = 0.f;
                for (int32_t x = 0; x < d; ++x) {
                  dot += qh[x] * LoadElem(pool.base, g.dtype, k_at + x);
                }
                Softmax& a = st[grp][h];
                const float sc = dot * scale;
                const float m_new = std::max(a.m, sc);
                const float correction = std::exp(a.m - m_new);
                const float p = std::exp(sc - m_new);
                a.l = a.l * correction + p;
                for (int32_t x = 0; x < d; ++x) {
                  a.acc[x] = a.acc[x] * correction + p * LoadElem(pool.base, g.dtype, v_at + x);
                }
                a.m = m_new;
              }
            }
          }
        }
        // Inside each warp: xor partners at group distances 1, 2, 4, ... (lane distance
        // lanes_per_token, 2·lanes_per_token, ...); every group ends with the warp's result.
        for (int32_t goff = 1; goff < s.groups_per_warp; goff *= 2) {
          std::vector<std::vector<Softmax>> next = st;
          for (int32_t grp = 0; grp < s.groups_per_cta; ++grp) {
            const int32_t partner = grp ^ goff;  // same warp: goff < groups_per_warp
            for (int32_t h = 0; h < heads; ++h) next[grp][h] = MergeTwo(st[grp][h], st[partner][h]);
          }
          st = std::move(next);
        }
        for (int32_t h = 0; h < heads; ++h) {
          const int64_t item = row * hq + head0 + h;
          float* o = split.num_splits == 1 ? out + item * d : &part_out[(sp * items + item) * d];
          float* l = split.num_splits == 1 ? lse + item : &part_lse[sp * items + item];
          float big_m = -INFINITY;
          for (int32_t w = 0; w < kDecodeWarps; ++w) {
            big_m = std::max(big_m, st[w * s.groups_per_warp][h].m);
          }
          if (big_m == -INFINITY) {
            std::fill(o, o + d, 0.f);
            *l = -INFINITY;
            continue;
          }
          float denom = 0.f;
          std::vector<float> sum(d, 0.f);
          for (int32_t w = 0; w < kDecodeWarps; ++w) {
            const Softmax& ws = st[w * s.groups_per_warp][h];
            const float weight = ws.m == -INFINITY ? 0.f : std::exp(ws.m - big_m);
            denom += ws.l * weight;
            for (int32_t x = 0; x < d; ++x) sum[x] += ws.acc[x] * weight;
          }
          for (int32_t x = 0; x < d; ++x) o[x] = sum[x] / denom;
          *l = big_m + std::log(denom);
        }
      }
    }
  }
  if (split.num_splits == 1) return;
  std::vector<const float*> outs, lses;
  for (int32_t sp = 0; sp < split.num_splits; ++sp) {
    outs.push_back(part_out.data() + sp * items * d);
    lses.push_back(part_lse.data() + sp * items);
  }
  MergeAttentionPartials(split.num_splits, outs.data(), lses.data(), items, d, out, lse);
}

void ExpectMatchesCpu(const std::vector<float>& out, const std::vector<float>& lse,
                      const std::vector<float>& ref_out, const std::vector<float>& ref_lse,
                      int32_t d) {
  for (size_t item = 0; item < ref_lse.size(); ++item) {
    const float* o = out.data() + item * d;
    const float* r = ref_out.data() + item * d;
    if (ref_lse[item] == -INFINITY) {
      ASSERT_EQ(lse[item], -INFINITY) << "item " << item;
      for (int32_t x = 0; x < d; ++x) ASSERT_EQ(o[x], 0.f) << "item " << item;
      continue;
    }
    double diff = 0, norm = 0;
    for (int32_t x = 0; x < d; ++x) {
      diff += (double{o[x]} - r[x]) * (double{o[x]} - r[x]);
      norm += double{r[x]} * r[x];
    }
    const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    const double lse_rel = std::abs(double{lse[item]} - ref_lse[item]) /
                           std::max(1.0, std::abs(double{ref_lse[item]}));
    ASSERT_LE(rel, 2e-5) << "item " << item;  // NaN fails too
    ASSERT_LE(lse_rel, 2e-5) << "item " << item;
  }
}

class DecodeKernelEmulationTest : public ::testing::Test {
 protected:
  // Every rank of the case's DCP group: pools written as the engines write them, then the
  // emulated kernel (planned split, and a forced many-way split) against PagedAttention.
  void Check(const AttentionCase& c) {
    SCOPED_TRACE(c.Describe());
    const AttentionData data = tandem::testing::MakeData(c);
    const PoolGeometry g{c.num_kv_heads, 2, c.dcp.block_size, c.head_dim, c.dtype};
    const int32_t hq = c.num_q_heads();
    const int64_t items = c.num_rows() * hq;
    const BlockTablesView tables{data.table_ids.data(), data.table_offsets.data(),
                                 static_cast<int32_t>(c.kv_len.size())};
    for (int32_t rank = 0; rank < c.dcp.dcp; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      std::vector<uint8_t> pool_bytes(PoolBytes(g, data.num_blocks), 0xff);  // NaN
      const KvPoolView pool{pool_bytes.data(), data.num_blocks, g};
      for (int32_t r = 0; r < static_cast<int32_t>(c.kv_len.size()); ++r) {
        const int64_t len = c.kv_len[r];
        if (len == 0) continue;
        std::vector<int64_t> positions(len), slots(len);
        std::iota(positions.begin(), positions.end(), int64_t{0});
        const std::vector<int32_t> request(len, r);
        ASSERT_TRUE(
            ComputeSlotMapping(c.dcp, rank, positions, request, tables, absl::MakeSpan(slots))
                .ok());
        WriteKvCache(pool, 1, slots.data(), len, data.k[r].data(), data.v[r].data());
        WriteKvCache(pool, 0, slots.data(), len, data.v[r].data(), data.k[r].data());
      }
      const AttentionRows rows{
          c.num_rows(), c.row_request.data(), c.row_position.data(), tables, c.dcp, rank};
      ASSERT_TRUE(ValidateAttentionCall(pool, 1, rows, hq).ok());
      std::vector<float> ref_out(items * c.head_dim), ref_lse(items);
      PagedAttention(pool, 1, rows, data.q.data(), hq, data.scale, ref_out.data(), ref_lse.data());

      const int64_t visible = MaxVisibleTokens(rows);
      absl::StatusOr<DecodeAttentionPlan> plan = PlanDecodeAttention(c.num_rows(), hq, g, visible);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const int64_t tps = std::max<int64_t>(1, (visible + 4) / 5);
      const AttentionSplit forced{
          static_cast<int32_t>(std::max<int64_t>(1, (visible + tps - 1) / tps)), tps};
      for (const AttentionSplit& split : {plan->split, forced}) {
        SCOPED_TRACE("split " + std::to_string(split.num_splits) + " x " +
                     std::to_string(split.tokens_per_split));
        std::vector<float> out(items * c.head_dim, NAN), lse(items, NAN);
        EmulateDecodeKernel(pool, 1, rows, data.q.data(), hq, data.scale, split, out.data(),
                            lse.data());
        ExpectMatchesCpu(out, lse, ref_out, ref_lse, c.head_dim);
        if (HasFatalFailure()) return;
      }
    }
  }

  AttentionCase NewCase(DcpGeometry dcp, int32_t kv_heads, int32_t group, int32_t head_dim,
                        KvDType dtype) {
    return testing::MakeCase(dcp, kv_heads, group, head_dim, dtype, rng_());
  }

  std::mt19937_64 rng_{20261201};
};

// dtypes × head_dim (64, 128, 40: partial lanes, 256: two f32 vectors per lane) × GQA 1, 3, 8,
// 12 (two passes) × DCP 1–4 with interleave 1, 2 or B: decode rows at contexts 0, 1, B−1, B·N,
// B·N+1 and a random one, a padding row, a chunked prefill request.
TEST_F(DecodeKernelEmulationTest, MatchesCpuAttentionAcrossShapes) {
  const int32_t b = 16;
  int index = 0;
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (int32_t head_dim : {64, 128, 40, 256}) {
      for (int32_t group : {1, 3, 8, 12}) {
        const std::vector<std::pair<int32_t, int32_t>> dcps = {{1, 1}, {2, b}, {3, 1}, {4, 2}};
        const auto [n, interleave] = dcps[index % dcps.size()];
        AttentionCase c =
            NewCase(DcpGeometry{b, n, interleave}, 1 + index % 2, group, head_dim, dtype);
        for (int64_t ctx : {0, 1, b - 1, b * n, b * n + 1}) AddDecodeRequest(c, ctx);
        AddDecodeRequest(c, static_cast<int64_t>(rng_() % 300));
        AddPaddingRow(c);
        const int64_t length = b * n + 1 + static_cast<int64_t>(rng_() % (b * n));
        AddPrefillRequest(c, length, std::min<int64_t>(length, 3));
        Check(c);
        if (HasFatalFailure()) return;
        ++index;
      }
    }
  }
}

// Long keys on few CTAs: the planner splits, and the emulated splits merge to the CPU result.
TEST_F(DecodeKernelEmulationTest, LongKeysAreSplitAndMerged) {
  for (int32_t n : {1, 2}) {
    AttentionCase c = NewCase(DcpGeometry{16, n, 1}, 1, 4, 64, KvDType::kBF16);
    AddDecodeRequest(c, 3000);
    ASSERT_GT(PlanDecodeSplit(1, 3001 / n, DecodeLaneShapeFor(64, 2).tokens_per_step).num_splits, 1)
        << "the case must split";
    Check(c);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace tandem::gpu
