// Sharded == dense: PagedAttention on every rank of a DCP group, merged by LSE, must equal a
// dense double-precision softmax over the unsharded KV, on every ISA path this CPU has.
#include "attention/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/cpu/attention_kernel.h"
#include "attention/cpu/attention_plan.h"
#include "attention/cpu/cpu_isa.h"
#include "common/parallel_for.h"
#include "gtest/gtest.h"
#include "tests/attention/cpu/attention_harness.h"

namespace tandem {
namespace {

using testing::AddDecodeRequest;
using testing::AddPaddingRow;
using testing::AddPrefillRequest;
using testing::AttentionCase;
using testing::AttentionData;
using testing::AttentionError;
using testing::AttentionOutput;
using testing::DenseOutput;
using testing::ShardedOutput;

// Stated tolerances on the worst (row, head): relative L2 error of the output and relative LSE
// error. f32 accumulates in f32 throughout (scores, online softmax, LSE merge): 1e-5. f16/bf16
// are checked against a reference on the rounded K/V, so only the same f32 arithmetic remains;
// their bound is kept a little looser because their rounded values enter the exp.
double Tolerance(KvDType t) { return t == KvDType::kF32 ? 1e-5 : 2e-5; }

std::vector<CpuIsa> SupportedIsas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  return isas;
}

// A rank owning none of a row's visible positions must report exactly lse = −inf and zeros,
// whatever the (NaN-filled) pool holds.
void ExpectEmptyPartialsAreExact(const AttentionCase& c, const ShardedOutput& got) {
  const int32_t hq = c.num_q_heads();
  for (int32_t rank = 0; rank < c.dcp.dcp; ++rank) {
    for (int64_t i = 0; i < c.num_rows(); ++i) {
      const int64_t p = c.row_position[i];
      if (p >= 0 && LocalLen(c.dcp, rank, p + 1) != 0) continue;
      for (int32_t h = 0; h < hq; ++h) {
        const int64_t item = i * hq + h;
        ASSERT_EQ(got.ranks[rank].lse[item], -INFINITY) << "rank " << rank << " row " << i;
        for (int32_t x = 0; x < c.head_dim; ++x) {
          ASSERT_EQ(got.ranks[rank].out[item * c.head_dim + x], 0.f)
              << "rank " << rank << " row " << i << " head " << h;
        }
      }
    }
  }
}

void ShuffleRows(AttentionCase& c, std::mt19937_64& rng) {
  std::vector<int64_t> perm(c.num_rows());
  for (int64_t i = 0; i < c.num_rows(); ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  AttentionCase shuffled = c;
  for (int64_t i = 0; i < c.num_rows(); ++i) {
    shuffled.row_request[i] = c.row_request[perm[i]];
    shuffled.row_position[i] = c.row_position[perm[i]];
  }
  c = shuffled;
}

// The plan PagedAttention makes for `c` on DCP rank 0 with `threads` threads.
attention_cpu::AttentionPlan PlanFor(const AttentionCase& c, int32_t threads) {
  attention_cpu::AttentionPlanInput in;
  in.num_rows = c.num_rows();
  in.request = c.row_request.data();
  in.position = c.row_position.data();
  in.dcp = c.dcp;
  in.num_kv_heads = c.num_kv_heads;
  in.group_size = c.group_size;
  in.head_dim = c.head_dim;
  in.threads = threads;
  in.max_tile_queries = attention_cpu::kMaxTileQueries;
  return attention_cpu::PlanAttention(in);
}

class ShardedAttentionTest : public ::testing::TestWithParam<KvDType> {
 protected:
  void TearDown() override {
    UnpinCpuIsa();
    SetThreadsForThisThread(HardwareThreads());
  }

  // Runs `c` on every supported ISA path with `threads` threads against one dense reference.
  void Check(const AttentionCase& c, int threads) {
    SCOPED_TRACE(c.Describe() + " threads=" + std::to_string(threads));
    const AttentionData d = testing::MakeData(c);
    const DenseOutput ref = testing::DenseReference(c, d);
    for (CpuIsa isa : SupportedIsas()) {
      SCOPED_TRACE(CpuIsaName(isa));
      ASSERT_TRUE(PinCpuIsa(isa).ok());
      SetThreadsForThisThread(threads);
      const absl::StatusOr<ShardedOutput> got = testing::RunSharded(c, d);
      ASSERT_TRUE(got.ok()) << got.status();
      const AttentionError e = testing::Compare(got->merged, ref, c.head_dim);
      EXPECT_LE(e.out_rel, Tolerance(c.dtype));
      EXPECT_LE(e.lse_rel, Tolerance(c.dtype));
      worst_ = std::max({worst_, e.out_rel, e.lse_rel});
      ExpectEmptyPartialsAreExact(c, *got);
    }
  }

  AttentionCase NewCase(DcpGeometry dcp, int32_t kv_heads, int32_t group, int32_t head_dim) {
    AttentionCase c;
    c.dcp = dcp;
    c.num_kv_heads = kv_heads;
    c.group_size = group;
    c.head_dim = head_dim;
    c.dtype = GetParam();
    c.seed = rng_();
    return c;
  }

  std::mt19937_64 rng_{20240611};
  double worst_ = 0;
};

// Every (N, B, I) of the grid with the edge context lengths 0, 1, B−1, B·N, B·N+1 as decode
// rows, one chunked-prefill request, one request absent from the call and a padding row, rows
// shuffled.
TEST_P(ShardedAttentionTest, EdgeLengthsOnEveryGeometry) {
  int32_t index = 0;
  for (int32_t n : {1, 2, 3, 4, 8}) {
    for (int32_t b : {1, 4, 16}) {
      for (int32_t i = 1; i <= b; ++i) {
        if (b % i != 0) continue;
        const int32_t group = std::vector<int32_t>{1, 2, 4}[index % 3];
        AttentionCase c = NewCase(DcpGeometry{b, n, i}, 1 + index % 2, group, 16);
        for (int64_t ctx : {0, 1, b - 1, b * n, b * n + 1}) AddDecodeRequest(c, ctx);
        c.kv_len.push_back(0);
        AddPaddingRow(c);
        const int64_t length = b * n + 1 + static_cast<int64_t>(rng_() % (b * n));
        AddPrefillRequest(c, length, std::min<int64_t>(length, 6));
        ShuffleRows(c, rng_);
        Check(c, 1 + index % 2);
        ++index;
      }
    }
  }
  RecordProperty("worst_relative_error", std::to_string(worst_));
}

// Random geometry, head dims 16/64/128, GQA 1/2/4, mixed decode and prefill requests with
// contexts up to several hundred tokens, some padding rows, 1–3 threads.
TEST_P(ShardedAttentionTest, RandomMixedBatches) {
  for (int trial = 0; trial < 8; ++trial) {
    const int32_t n = std::vector<int32_t>{1, 2, 3, 4, 8}[rng_() % 5];
    const int32_t b = std::vector<int32_t>{1, 4, 16}[rng_() % 3];
    std::vector<int32_t> divisors;
    for (int32_t i = 1; i <= b; ++i) {
      if (b % i == 0) divisors.push_back(i);
    }
    const int32_t interleave = divisors[rng_() % divisors.size()];
    AttentionCase c = NewCase(DcpGeometry{b, n, interleave}, 1 + static_cast<int32_t>(rng_() % 2),
                              std::vector<int32_t>{1, 2, 4}[rng_() % 3],
                              std::vector<int32_t>{16, 64, 128}[rng_() % 3]);
    const int requests = 1 + static_cast<int>(rng_() % 4);
    for (int r = 0; r < requests; ++r) {
      const int64_t length = 1 + static_cast<int64_t>(rng_() % 400);
      if (rng_() % 2 == 0) {
        AddDecodeRequest(c, length - 1);
      } else {
        AddPrefillRequest(c, length,
                          1 + static_cast<int64_t>(rng_() % std::min<int64_t>(length, 12)));
      }
    }
    ShuffleRows(c, rng_);
    Check(c, 1 + static_cast<int>(rng_() % 3));
  }
  RecordProperty("worst_relative_error", std::to_string(worst_));
}

// One long request on two threads: the plan must split its KV range across the threads, and
// the LSE merge of the chunks must still give the dense result.
TEST_P(ShardedAttentionTest, LongSequenceIsSplitAcrossThreads) {
  for (int32_t n : {1, 2}) {
    AttentionCase c = NewCase(DcpGeometry{16, n, 1}, 1, 4, 64);
    AddDecodeRequest(c, 3000);
    AddPrefillRequest(c, 1200, 5);

    ASSERT_FALSE(PlanFor(c, 2).merges.empty()) << "the case must split";
    Check(c, 2);
  }
}

// Prefill chunks long enough to fill tiles with kQueryLanesMinQueries..16 queries at head_dim 64
// and 128 (the query-lanes path on AVX-512 and AVX2), on blocks that are shorter than, equal to and
// longer than a scoring piece, so pieces of every length 1..16 occur (each rounded-up score
// width) and ranges start mid-block; then the same with the range split across threads.
TEST_P(ShardedAttentionTest, PrefillTilesOnTheQueryLanesPath) {
  for (int32_t head_dim : {64, 128}) {
    for (int32_t group : {1, 3, 4}) {
      for (const DcpGeometry& dcp :
           {DcpGeometry{16, 1, 1}, DcpGeometry{4, 2, 1}, DcpGeometry{7, 2, 7},
            DcpGeometry{32, 3, 32}, DcpGeometry{1, 2, 1}, DcpGeometry{10, 1, 1}}) {
        AttentionCase c = NewCase(dcp, 2, group, head_dim);
        AddPrefillRequest(c, 150 + static_cast<int64_t>(rng_() % 100), 37);
        AddPrefillRequest(c, 21, 21);  // a whole prompt: its first rows see only a few tokens
        AddDecodeRequest(c, 40);
        ShuffleRows(c, rng_);

        const attention_cpu::AttentionPlan plan = PlanFor(c, 1);
        ASSERT_TRUE(std::any_of(plan.tiles.begin(), plan.tiles.end(), [](const auto& t) {
          return t.num_queries() >= attention_cpu::kQueryLanesMinQueries;
        })) << "the case must have tiles for the query-lanes path";
        Check(c, 1);
      }
    }
  }
  AttentionCase c = NewCase(DcpGeometry{16, 2, 1}, 1, 3, 64);
  AddPrefillRequest(c, 2500, 40);  // few units: the plan splits their ranges over the threads
  ASSERT_FALSE(PlanFor(c, 2).merges.empty()) << "the case must split";
  Check(c, 2);
  RecordProperty("worst_relative_error", std::to_string(worst_));
}

// AVX2 runs the query-lanes path on pairs of 8-lane vectors with each lane's arithmetic that of an
// AVX-512 lane (attention_tile_query_lanes.h), so a call whose every tile takes that path gives
// the same bits on both (and the dense reference's tolerance on each, as everywhere).
TEST_P(ShardedAttentionTest, QueryLanesTilesGiveTheSameBitsOnAvx2AndAvx512) {
  if (!CpuSupports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 to compare with";
  for (int32_t head_dim : {64, 128}) {
    for (const DcpGeometry& dcp : {DcpGeometry{16, 1, 1}, DcpGeometry{7, 1, 1}}) {
      AttentionCase c = NewCase(dcp, 2, 4, head_dim);
      AddPrefillRequest(c, 170, 40);  // 40 rows × 4 GQA heads: tiles of 16 queries
      AddPrefillRequest(c, 24, 24);   // a whole prompt, its first rows see a few tokens
      SCOPED_TRACE(c.Describe());
      const attention_cpu::AttentionPlan plan = PlanFor(c, 1);
      ASSERT_TRUE(std::all_of(plan.tiles.begin(), plan.tiles.end(), [](const auto& t) {
        return t.num_queries() >= attention_cpu::kQueryLanesMinQueries;
      })) << "every tile must take the query-lanes path";
      const AttentionData d = testing::MakeData(c);
      std::vector<AttentionOutput> outs;
      for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        ASSERT_TRUE(PinCpuIsa(isa).ok());
        SetThreadsForThisThread(1);
        const absl::StatusOr<ShardedOutput> got = testing::RunSharded(c, d);
        ASSERT_TRUE(got.ok()) << got.status();
        outs.push_back(got->merged);
      }
      ASSERT_EQ(outs[0].out.size(), outs[1].out.size());
      for (size_t i = 0; i < outs[0].out.size(); ++i) {
        ASSERT_EQ(outs[0].out[i], outs[1].out[i]) << "output element " << i;
      }
      for (size_t i = 0; i < outs[0].lse.size(); ++i) {
        ASSERT_EQ(outs[0].lse[i], outs[1].lse[i]) << "lse " << i;
      }
      Check(c, 1);
    }
  }
}

// More GQA heads per KV head than one tile holds: the heads are spread over several tiles.
TEST_P(ShardedAttentionTest, WideGqaGroupsSpanSeveralTiles) {
  AttentionCase c = NewCase(DcpGeometry{4, 2, 2}, 1, 2 * attention_cpu::kMaxTileQueries + 3, 16);
  AddDecodeRequest(c, 37);
  AddPrefillRequest(c, 20, 3);
  Check(c, 2);
}

// Head dims the wide paths cannot vectorise fall back to a narrower path and stay correct.
TEST_P(ShardedAttentionTest, HeadDimsOffTheVectorWidth) {
  for (int32_t head_dim : {8, 24, 20, 3}) {
    AttentionCase c = NewCase(DcpGeometry{4, 2, 1}, 2, 2, head_dim);
    AddDecodeRequest(c, 45);
    AddPrefillRequest(c, 13, 4);
    Check(c, 2);
  }
}

// Blocks larger than a scoring piece, or not a multiple of it: pieces split blocks unevenly.
TEST_P(ShardedAttentionTest, BlocksOfOtherSizes) {
  for (const DcpGeometry& dcp : {DcpGeometry{24, 2, 8}, DcpGeometry{32, 3, 32},
                                 DcpGeometry{7, 2, 7}, DcpGeometry{64, 1, 1}}) {
    AttentionCase c = NewCase(dcp, 2, 2, 32);
    AddDecodeRequest(c, 5 * dcp.block_size * dcp.dcp + 3);
    AddDecodeRequest(c, dcp.block_size - 1);
    AddPrefillRequest(c, 3 * dcp.block_size + 5, 7);
    ShuffleRows(c, rng_);
    Check(c, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(AllKvDTypes, ShardedAttentionTest,
                         ::testing::Values(KvDType::kF32, KvDType::kF16, KvDType::kBF16),
                         [](const ::testing::TestParamInfo<KvDType>& info) {
                           return std::string(KvDTypeName(info.param));
                         });

TEST(CpuIsaTest, ThisMachineRunsEveryPath) {
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!CpuSupports(isa)) {
      GTEST_SKIP() << "this CPU lacks the " << CpuIsaName(isa)
                   << " path; the sharded tests checked only the paths it has";
    }
  }
  EXPECT_EQ(DetectedCpuIsa(), CpuIsa::kAvx512);
}

TEST(PagedAttentionTest, ZeroRowsWritesNothing) {
  PoolGeometry g;
  KvPoolView pool{nullptr, 0, g};
  AttentionRows rows;
  float out = 7.f, lse = 7.f;
  ASSERT_TRUE(ValidateAttentionCall(pool, 0, rows, 1).ok());
  PagedAttention(pool, 0, rows, nullptr, 1, 1.f, &out, &lse);
  EXPECT_EQ(out, 7.f);
  EXPECT_EQ(lse, 7.f);
}

}  // namespace
}  // namespace tandem
