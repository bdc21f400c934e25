// CUDA paged attention, KV cache write, LSE merge and correction against the CPU kernels
// (attention/cpu/paged_attention.h, attention/lse_merge.h) and the dense double-precision
// reference of the CPU harness, rank by rank over whole DCP groups. Every test runs for both
// kernels (suffix /per_head: LaunchPagedAttention, the default; /gqa_split_kv:
// LaunchDecodeAttention, selected by TANDEM_CUDA_ATTENTION=gqa_split_kv).
//
// Stated tolerances (worst (row, head) item):
// * the KV write is bit-identical: every byte of every rank's pool (NaN-filled, both layers)
//   equals the CPU-written pool;
// * GPU vs CPU partials and GPU merged vs dense reference: relative L2 error of the output and
//   |Δlse| / max(1, |lse|) at most 2e-5 — both sides accumulate in fp32 over identical K/V (the
//   pools are byte-equal), so only summation order and expf/logf ulps differ; observed errors are
//   ~1e-7..1e-6, while a wrong slot, head or mask gives errors of order 1;
// * a partial with no keys is exactly lse = −inf and zeros, and padding rows (negative
//   positions) likewise, whatever their request index;
// * the GPU correction and its merged LSE vs the CPU's: Fp32MergeBound (cuda_test_util.h), the
//   expf/logf ulp differences amplified by |LSE| (a fixed 1e-6 failed on an H200, issue 14).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "attention/cuda/attention_launch_plan.h"
#include "attention/cuda/cuda_attention.h"
#include "attention/cuda/decode_attention_plan.h"
#include "attention/kv_dtype.h"
#include "attention/lse_merge.h"
#include "gtest/gtest.h"
#include "tests/attention/cpu/attention_harness.h"
#include "tests/attention/cuda/cuda_test_util.h"

namespace tandem {
namespace {

using testing::AddDecodeRequest;
using testing::AddPrefillRequest;
using testing::AttentionCase;
using testing::AttentionData;
using testing::AttentionOutput;
using testing::CudaTest;
using testing::DenseOutput;
using testing::DeviceArray;
using testing::DeviceBytes;

constexpr double kTolerance = 2e-5;
constexpr int32_t kLayer = 1;  // attended; layer 0 holds K and V swapped

PoolGeometry Geometry(const AttentionCase& c) {
  return PoolGeometry{c.num_kv_heads, 2, c.dcp.block_size, c.head_dim, c.dtype};
}

// How the GPU launch cuts each key range.
enum class SplitMode { kPlanned, kForcedMany };

struct Worst {
  double out = 0;
  double lse = 0;
};

// Compares one output against a reference (float or double), item by item.
template <typename Ref>
void ExpectClose(const std::vector<float>& out, const std::vector<float>& lse,
                 const std::vector<Ref>& ref_out, const std::vector<Ref>& ref_lse, int32_t head_dim,
                 const char* what, Worst& worst) {
  ASSERT_EQ(lse.size(), ref_lse.size());
  for (size_t item = 0; item < ref_lse.size(); ++item) {
    const float* o = out.data() + item * head_dim;
    const Ref* r = ref_out.data() + item * head_dim;
    if (std::isinf(static_cast<double>(ref_lse[item])) && ref_lse[item] < 0) {
      ASSERT_EQ(lse[item], -INFINITY) << what << " item " << item;
      for (int32_t x = 0; x < head_dim; ++x) ASSERT_EQ(o[x], 0.f) << what << " item " << item;
      continue;
    }
    double diff = 0, norm = 0;
    for (int32_t x = 0; x < head_dim; ++x) {
      diff += (o[x] - static_cast<double>(r[x])) * (o[x] - static_cast<double>(r[x]));
      norm += static_cast<double>(r[x]) * r[x];
    }
    double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    double lse_rel = std::abs(lse[item] - static_cast<double>(ref_lse[item])) /
                     std::max(1.0, std::abs(static_cast<double>(ref_lse[item])));
    if (std::isnan(rel)) rel = INFINITY;
    if (std::isnan(lse_rel)) lse_rel = INFINITY;
    ASSERT_LE(rel, kTolerance) << what << " item " << item;
    ASSERT_LE(lse_rel, kTolerance) << what << " item " << item;
    worst.out = std::max(worst.out, rel);
    worst.lse = std::max(worst.lse, lse_rel);
  }
}

class CudaPagedAttentionTest : public CudaTest,
                               public ::testing::WithParamInterface<gpu::CudaAttentionKernel> {
 protected:
  bool Gqa() const { return GetParam() == gpu::CudaAttentionKernel::kGqaSplitKv; }

  // The split the backend would plan for this kernel.
  absl::StatusOr<gpu::AttentionSplit> PlannedSplit(const PoolGeometry& g, int64_t rows, int32_t hq,
                                                   int64_t visible) const {
    if (!Gqa()) return gpu::PlanAttentionSplit(rows * hq, visible);
    absl::StatusOr<gpu::DecodeAttentionPlan> plan = gpu::PlanDecodeAttention(rows, hq, g, visible);
    if (!plan.ok()) return plan.status();
    return plan->split;
  }

  absl::Status Launch(const gpu::PagedAttentionArgs& a) const {
    return Gqa() ? gpu::LaunchDecodeAttention(a, nullptr) : gpu::LaunchPagedAttention(a, nullptr);
  }

  // bf16 activations (PagedAttentionArgs::bf16_io): the launch `a` on bf16 q bits writes exactly
  // what it writes on those values as f32, rounded once to bf16, and the same LSE — through the
  // single-split store and the split merge alike.
  void CheckBf16Io(const gpu::PagedAttentionArgs& a, const std::vector<float>& q,
                   int64_t out_floats, int64_t items) const {
    std::vector<uint16_t> q16(q.size());
    std::vector<float> qw(q.size());
    for (size_t i = 0; i < q.size(); ++i) qw[i] = Bf16ToFloat(q16[i] = FloatToBf16(q[i]));
    DeviceArray<float> dqw(qw), out32(out_floats), lse32(items), lse16(items);
    DeviceArray<uint16_t> dq16(q16), out16(out_floats);
    out16.Fill(0xff);
    gpu::PagedAttentionArgs f = a;
    f.q = dqw.get();
    f.out = out32.get();
    f.lse = lse32.get();
    ASSERT_TRUE(Launch(f).ok());
    gpu::PagedAttentionArgs b = a;
    b.q = reinterpret_cast<const float*>(dq16.get());
    b.out = reinterpret_cast<float*>(out16.get());
    b.lse = lse16.get();
    b.bf16_io = true;
    ASSERT_TRUE(Launch(b).ok());
    testing::SyncDevice();
    const std::vector<float> want = out32.Download(), want_lse = lse32.Download();
    const std::vector<uint16_t> got = out16.Download();
    const std::vector<float> got_lse = lse16.Download();
    for (int64_t i = 0; i < out_floats; ++i) {
      ASSERT_EQ(got[i], FloatToBf16(want[i])) << "bf16 out element " << i;
    }
    for (int64_t i = 0; i < items; ++i) {
      ASSERT_EQ(std::memcmp(&got_lse[i], &want_lse[i], sizeof(float)), 0) << "bf16 lse " << i;
    }
  }

  // Shards `c` over its DCP group exactly as the engines do, on the CPU and on the GPU, and
  // checks pools, per-rank partials, the GPU merge and the GPU correction.
  void Check(const AttentionCase& c, SplitMode mode) {
    SCOPED_TRACE(c.Describe() + (mode == SplitMode::kPlanned ? " planned" : " forced-split"));
    const AttentionData d = testing::MakeData(c);
    const DenseOutput ref = testing::DenseReference(c, d);
    const PoolGeometry g = Geometry(c);
    const int32_t hq = c.num_q_heads();
    const int32_t n = c.dcp.dcp;
    const int64_t items = c.num_rows() * hq;
    const int64_t out_floats = items * c.head_dim;
    const BlockTablesView tables{d.table_ids.data(), d.table_offsets.data(),
                                 static_cast<int32_t>(c.kv_len.size())};
    DeviceArray<float> q(d.q);

    std::vector<float> gpu_out_all, gpu_lse_all;  // [n][items][D], [n][items]
    std::vector<AttentionOutput> cpu_parts;
    for (int32_t rank = 0; rank < n; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      // ---- KV write: CPU pool and GPU pool from the same rows ----
      const int64_t pool_bytes = PoolBytes(g, d.num_blocks);
      std::vector<uint8_t> cpu_pool(pool_bytes, 0xff);  // NaN in every dtype
      DeviceBytes gpu_pool(pool_bytes);
      gpu_pool.Fill(0xff);
      const KvPoolView cpu_view{cpu_pool.data(), d.num_blocks, g};
      const KvPoolView gpu_view{gpu_pool.data(), d.num_blocks, g};
      for (int32_t r = 0; r < static_cast<int32_t>(c.kv_len.size()); ++r) {
        const int64_t len = c.kv_len[r];
        if (len == 0) continue;
        std::vector<int64_t> positions(len), slots(len);
        std::iota(positions.begin(), positions.end(), int64_t{0});
        const std::vector<int32_t> request(len, r);
        ASSERT_TRUE(
            ComputeSlotMapping(c.dcp, rank, positions, request, tables, absl::MakeSpan(slots))
                .ok());
        ASSERT_TRUE(ValidateKvCacheWrite(cpu_view, kLayer, slots.data(), len).ok());
        WriteKvCache(cpu_view, kLayer, slots.data(), len, d.k[r].data(), d.v[r].data());
        WriteKvCache(cpu_view, 0, slots.data(), len, d.v[r].data(), d.k[r].data());
        DeviceArray<int64_t> dslots(slots);
        DeviceArray<float> dk(d.k[r]), dv(d.v[r]);
        ASSERT_TRUE(gpu::LaunchWriteKvCache(gpu_view, kLayer, dslots.get(), len, dk.get(), dv.get(),
                                            nullptr)
                        .ok());
        ASSERT_TRUE(
            gpu::LaunchWriteKvCache(gpu_view, 0, dslots.get(), len, dv.get(), dk.get(), nullptr)
                .ok());
        testing::SyncDevice();
      }
      std::vector<uint8_t> gpu_pool_host(pool_bytes);
      gpu_pool.Download(gpu_pool_host.data(), pool_bytes);
      ASSERT_EQ(std::memcmp(gpu_pool_host.data(), cpu_pool.data(), pool_bytes), 0)
          << "GPU-written pool differs from the CPU-written pool";

      // ---- attention on this rank ----
      const AttentionRows host_rows{
          c.num_rows(), c.row_request.data(), c.row_position.data(), tables, c.dcp, rank};
      ASSERT_TRUE(ValidateAttentionCall(cpu_view, kLayer, host_rows, hq).ok());
      AttentionOutput cpu;
      cpu.out.assign(out_floats, std::nanf(""));
      cpu.lse.assign(items, std::nanf(""));
      PagedAttention(cpu_view, kLayer, host_rows, d.q.data(), hq, d.scale, cpu.out.data(),
                     cpu.lse.data());

      std::vector<std::byte> blob;
      const gpu::PackedRowsLayout layout = gpu::PackAttentionRows(host_rows, blob);
      DeviceBytes dblob(layout.bytes);
      dblob.Upload(blob.data(), layout.bytes);
      gpu::PagedAttentionArgs a;
      a.pool = gpu_view;
      a.layer = kLayer;
      a.rows = gpu::RowsInBlob(host_rows, layout, dblob.data());
      a.q = q.get();
      a.num_q_heads = hq;
      a.scale = d.scale;
      const int64_t visible = gpu::MaxVisibleTokens(host_rows);
      if (mode == SplitMode::kPlanned) {
        absl::StatusOr<gpu::AttentionSplit> planned = PlannedSplit(g, c.num_rows(), hq, visible);
        ASSERT_TRUE(planned.ok()) << planned.status();
        a.split = *planned;
      } else {
        // Tiny splits: exercises the split + merge path on short sequences too.
        a.split.tokens_per_split = std::max<int64_t>(1, (visible + 6) / 7);
        a.split.num_splits = static_cast<int32_t>(std::max<int64_t>(
            1, (visible + a.split.tokens_per_split - 1) / a.split.tokens_per_split));
      }
      DeviceArray<float> scratch(
          std::max<int64_t>(1, gpu::AttentionScratchFloats(a.split, items, c.head_dim)));
      a.scratch = scratch.get();
      DeviceArray<float> out(out_floats), lse(items);
      out.Fill(0xff);
      lse.Fill(0xff);
      a.out = out.get();
      a.lse = lse.get();
      const absl::Status launched = Launch(a);
      ASSERT_TRUE(launched.ok()) << launched;
      testing::SyncDevice();
      const std::vector<float> gout = out.Download(), glse = lse.Download();
      ExpectClose(gout, glse, cpu.out, cpu.lse, c.head_dim, "gpu vs cpu partial", worst_);
      if (HasFatalFailure()) return;
      CheckBf16Io(a, d.q, out_floats, items);
      if (HasFatalFailure()) return;
      gpu_out_all.insert(gpu_out_all.end(), gout.begin(), gout.end());
      gpu_lse_all.insert(gpu_lse_all.end(), glse.begin(), glse.end());
      cpu_parts.push_back(std::move(cpu));
    }

    // ---- N-way merge on the GPU == dense reference ----
    DeviceArray<float> parts_out(gpu_out_all), parts_lse(gpu_lse_all);
    DeviceArray<float> merged(out_floats), merged_lse(items);
    ASSERT_TRUE(gpu::LaunchMergePartials(n, parts_out.get(), parts_lse.get(), items, c.head_dim,
                                         merged.get(), merged_lse.get(), nullptr)
                    .ok());
    testing::SyncDevice();
    ExpectClose(merged.Download(), merged_lse.Download(), ref.out, ref.lse, c.head_dim,
                "gpu merge vs dense", worst_);
    if (HasFatalFailure()) return;

    // ---- correction: Σ_me CorrectPartial(me) == merged output; each equals the CPU's ----
    std::vector<double> sum(out_floats, 0.0);
    for (int32_t me = 0; me < n; ++me) {
      std::vector<float> mine(gpu_out_all.begin() + me * out_floats,
                              gpu_out_all.begin() + (me + 1) * out_floats);
      std::vector<float> cpu_corrected = mine;
      CorrectPartialInPlace(n, me, gpu_lse_all.data(), items, c.head_dim, cpu_corrected.data(),
                            nullptr);
      DeviceArray<float> dmine(mine), dmerged_lse(items);
      ASSERT_TRUE(gpu::LaunchCorrectPartial(n, me, parts_lse.get(), items, c.head_dim, dmine.get(),
                                            dmerged_lse.get(), nullptr)
                      .ok());
      testing::SyncDevice();
      const std::vector<float> corrected = dmine.Download();
      for (int64_t i = 0; i < out_floats; ++i) {
        const float merged_lse_i = MergeLse(gpu_lse_all.data() + i / c.head_dim, n, items);
        ASSERT_NEAR(corrected[i], cpu_corrected[i],
                    testing::Fp32MergeBound(n, merged_lse_i, std::abs(cpu_corrected[i])))
            << "rank " << me << " element " << i;
        sum[i] += corrected[i];
      }
      const std::vector<float> mlse = dmerged_lse.Download();
      for (int64_t it = 0; it < items; ++it) {
        const float want = MergeLse(gpu_lse_all.data() + it, n, items);
        if (want == -INFINITY) {
          ASSERT_EQ(mlse[it], -INFINITY);
        } else {
          ASSERT_NEAR(mlse[it], want, testing::Fp32MergeBound(n, want, 1.0));
        }
      }
    }
    std::vector<float> sum_f(sum.begin(), sum.end());
    std::vector<float> ref_lse_f(ref.lse.begin(), ref.lse.end());
    ExpectClose(sum_f, ref_lse_f, ref.out, ref.lse, c.head_dim, "sum of corrected vs dense",
                worst_);
  }

  AttentionCase NewCase(DcpGeometry dcp, int32_t kv_heads, int32_t group, int32_t head_dim,
                        KvDType dtype) {
    return testing::MakeCase(dcp, kv_heads, group, head_dim, dtype, rng_());
  }

  void ShuffleRows(AttentionCase& c) {
    std::vector<int64_t> perm(c.num_rows());
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::shuffle(perm.begin(), perm.end(), rng_);
    AttentionCase s = c;
    for (int64_t i = 0; i < c.num_rows(); ++i) {
      s.row_request[i] = c.row_request[perm[i]];
      s.row_position[i] = c.row_position[perm[i]];
    }
    c = s;
  }

  void TearDown() override {
    RecordProperty("worst_out_rel", std::to_string(worst_.out));
    RecordProperty("worst_lse_rel", std::to_string(worst_.lse));
  }

  std::mt19937_64 rng_{20260611};
  Worst worst_;
};

// Every dtype × head_dim (64, 128, and 40 / 256 for partial and full lane use) × GQA 1/4/8 ×
// DCP 1–4 with interleave 1 or B: decode rows at contexts 0, 1, B−1, B·N, B·N+1 and a random
// one, a chunked prefill request, a request absent from the call, rows shuffled.
TEST_P(CudaPagedAttentionTest, EdgeLengthsAcrossShapes) {
  const int32_t b = 16;
  int index = 0;
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (int32_t head_dim : {64, 128, 40, 256}) {
      for (int32_t group : {1, 4, 8}) {
        for (auto [n, interleave] : std::vector<std::pair<int32_t, int32_t>>{
                 {1, 1}, {2, 1}, {2, b}, {3, 1}, {4, b}, {4, 2}}) {
          AttentionCase c =
              NewCase(DcpGeometry{b, n, interleave}, 1 + index % 2, group, head_dim, dtype);
          for (int64_t ctx : {0, 1, b - 1, b * n, b * n + 1}) AddDecodeRequest(c, ctx);
          AddDecodeRequest(c, static_cast<int64_t>(rng_() % 300));
          c.kv_len.push_back(0);
          const int64_t length = b * n + 1 + static_cast<int64_t>(rng_() % (b * n));
          AddPrefillRequest(c, length, std::min<int64_t>(length, 7));
          ShuffleRows(c);
          Check(c, index % 3 == 0 ? SplitMode::kForcedMany : SplitMode::kPlanned);
          if (HasFatalFailure()) return;
          ++index;
        }
      }
    }
  }
}

// Small block sizes (many blocks per request) and a whole prompt prefilled at once.
TEST_P(CudaPagedAttentionTest, SmallBlocksAndFullPrefill) {
  for (int32_t b : {1, 4}) {
    for (int32_t n : {1, 2, 3}) {
      AttentionCase c = NewCase(DcpGeometry{b, n, 1}, 2, 4, 64, KvDType::kBF16);
      AddPrefillRequest(c, 37, 37);
      AddDecodeRequest(c, 5);
      ShuffleRows(c);
      Check(c, SplitMode::kPlanned);
      if (HasFatalFailure()) return;
      Check(c, SplitMode::kForcedMany);
      if (HasFatalFailure()) return;
    }
  }
}

// Long keys with few (row, head) items: the planner splits the keys across blocks and the
// split partials are merged on the GPU.
TEST_P(CudaPagedAttentionTest, LongSequencesAreSplitAndMerged) {
  for (int32_t n : {1, 2}) {
    for (KvDType dtype : {KvDType::kF32, KvDType::kF16}) {
      AttentionCase c = NewCase(DcpGeometry{16, n, 1}, 1, 1, 128, dtype);
      AddDecodeRequest(c, 4000);
      AddPrefillRequest(c, 1500, 3);
      const absl::StatusOr<gpu::AttentionSplit> split =
          PlannedSplit(Geometry(c), c.num_rows(), c.num_q_heads(), 4001 / n);
      ASSERT_TRUE(split.ok()) << split.status();
      ASSERT_GT(split->num_splits, 1) << "the case must split";
      Check(c, SplitMode::kPlanned);
      if (HasFatalFailure()) return;
    }
  }
}

// Random mixes of decode and prefill requests on random geometries.
TEST_P(CudaPagedAttentionTest, RandomMixedBatches) {
  for (int trial = 0; trial < 12; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng_() % 4);
    const int32_t b = std::vector<int32_t>{4, 16, 32}[rng_() % 3];
    const int32_t interleave = rng_() % 2 == 0 ? 1 : b;
    const KvDType dtype =
        std::vector<KvDType>{KvDType::kF32, KvDType::kF16, KvDType::kBF16}[rng_() % 3];
    AttentionCase c = NewCase(DcpGeometry{b, n, interleave}, 1 + static_cast<int32_t>(rng_() % 2),
                              std::vector<int32_t>{1, 4, 8}[rng_() % 3],
                              std::vector<int32_t>{64, 128}[rng_() % 2], dtype);
    const int requests = 1 + static_cast<int>(rng_() % 5);
    for (int r = 0; r < requests; ++r) {
      const int64_t length = 1 + static_cast<int64_t>(rng_() % 700);
      if (rng_() % 2 == 0) {
        AddDecodeRequest(c, length - 1);
      } else {
        AddPrefillRequest(c, length,
                          1 + static_cast<int64_t>(rng_() % std::min<int64_t>(length, 12)));
      }
    }
    ShuffleRows(c);
    Check(c, trial % 2 == 0 ? SplitMode::kPlanned : SplitMode::kForcedMany);
    if (HasFatalFailure()) return;
  }
}

// Padding rows (negative positions, as the DCP all-gather pads ranks to equal row counts) get
// exactly zeros and −inf; their request index is never read (here it is out of range), and
// real rows in the same call are unaffected.
TEST_P(CudaPagedAttentionTest, PaddingRowsHaveNoKeys) {
  const int32_t hq = 4, d = 64;
  const PoolGeometry g{1, 1, 16, d, KvDType::kF32};
  const int64_t blocks = 2;
  std::vector<float> pool(PoolBytes(g, blocks) / sizeof(float));
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  for (float& x : pool) x = normal(rng);
  DeviceArray<float> dpool(pool);
  const std::vector<int32_t> ids = {1, 0};
  const std::vector<int64_t> offsets = {0, 2};
  const std::vector<int32_t> request = {12345, 0, -7, 0};
  const std::vector<int64_t> position = {-1, 20, -1, 3};
  const AttentionRows host_rows{4,
                                request.data(),
                                position.data(),
                                BlockTablesView{ids.data(), offsets.data(), 1},
                                DcpGeometry{16, 1, 1},
                                0};
  std::vector<float> q(4 * hq * d);
  for (float& x : q) x = normal(rng);

  // CPU reference over the real rows only (its padding handling is not what is tested here).
  const std::vector<int32_t> real_request = {0, 0};
  const std::vector<int64_t> real_position = {20, 3};
  const AttentionRows real_rows{
      2, real_request.data(), real_position.data(), host_rows.tables, host_rows.dcp, 0};
  const KvPoolView cpu_view{pool.data(), blocks, g};
  std::vector<float> cpu_q(q.begin() + 1 * hq * d, q.begin() + 2 * hq * d);
  cpu_q.insert(cpu_q.end(), q.begin() + 3 * hq * d, q.end());
  std::vector<float> cpu_out(2 * hq * d), cpu_lse(2 * hq);
  ASSERT_TRUE(ValidateAttentionCall(cpu_view, 0, real_rows, hq).ok());
  PagedAttention(cpu_view, 0, real_rows, cpu_q.data(), hq, 0.125f, cpu_out.data(), cpu_lse.data());

  std::vector<std::byte> blob;
  const gpu::PackedRowsLayout layout = gpu::PackAttentionRows(host_rows, blob);
  DeviceBytes dblob(layout.bytes);
  dblob.Upload(blob.data(), layout.bytes);
  DeviceArray<float> dq(q), out(4 * hq * d), lse(4 * hq);
  out.Fill(0xff);
  lse.Fill(0xff);
  gpu::PagedAttentionArgs a;
  a.pool = KvPoolView{dpool.get(), blocks, g};
  a.rows = gpu::RowsInBlob(host_rows, layout, dblob.data());
  a.q = dq.get();
  a.num_q_heads = hq;
  a.scale = 0.125f;
  a.out = out.get();
  a.lse = lse.get();
  const absl::StatusOr<gpu::AttentionSplit> split =
      PlannedSplit(g, 4, hq, gpu::MaxVisibleTokens(host_rows));
  ASSERT_TRUE(split.ok()) << split.status();
  a.split = *split;
  ASSERT_EQ(gpu::MaxVisibleTokens(host_rows), 21);
  ASSERT_TRUE(Launch(a).ok());
  testing::SyncDevice();
  const std::vector<float> gout = out.Download(), glse = lse.Download();
  for (int row : {0, 2}) {
    for (int h = 0; h < hq; ++h) {
      EXPECT_EQ(glse[row * hq + h], -INFINITY) << "padding row " << row;
      for (int x = 0; x < d; ++x) ASSERT_EQ(gout[(row * hq + h) * d + x], 0.f);
    }
  }
  // Real rows 1 and 3 of the GPU call are rows 0 and 1 of the CPU call.
  std::vector<float> real_out, real_lse;
  for (int row : {1, 3}) {
    real_out.insert(real_out.end(), gout.begin() + row * hq * d, gout.begin() + (row + 1) * hq * d);
    real_lse.insert(real_lse.end(), glse.begin() + row * hq, glse.begin() + (row + 1) * hq);
  }
  ExpectClose(real_out, real_lse, cpu_out, cpu_lse, d, "real rows next to padding", worst_);
}

// Shape errors are INVALID_ARGUMENT before anything is launched.
TEST_P(CudaPagedAttentionTest, RejectsBadShapes) {
  gpu::PagedAttentionArgs a;
  a.pool.geometry = PoolGeometry{2, 1, 16, 300, KvDType::kF32};
  a.num_q_heads = 4;
  a.rows.num_rows = 1;
  absl::Status s = Launch(a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("head_dim 300 is outside [1, 256]"), std::string::npos) << s;
  a.pool.geometry.head_dim = 64;
  a.num_q_heads = 3;
  s = Launch(a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_q_heads=3 is not a positive multiple of num_kv_heads=2"),
            std::string::npos)
      << s;
  s = gpu::LaunchCorrectPartial(2, 2, nullptr, 1, 64, nullptr, nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("partial 2 is outside [0, 2)"), std::string::npos) << s;
  if (Gqa()) {
    // 36 bf16 = 72 bytes: not whole 16-byte vectors (the backend uses the per-head kernel).
    float dummy[16];
    a.pool = KvPoolView{dummy, 1, PoolGeometry{2, 1, 16, 36, KvDType::kBF16}};
    a.num_q_heads = 4;
    a.q = a.out = a.lse = dummy;
    const int32_t request = 0;
    const int64_t position = 0;
    a.rows.request = &request;
    a.rows.position = &position;
    s = Launch(a);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("head_dim 36 of 2-byte elements"), std::string::npos) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaPagedAttentionTest,
                         ::testing::Values(gpu::CudaAttentionKernel::kPerHead,
                                           gpu::CudaAttentionKernel::kGqaSplitKv),
                         [](const ::testing::TestParamInfo<gpu::CudaAttentionKernel>& info) {
                           return info.param == gpu::CudaAttentionKernel::kPerHead
                                      ? std::string("per_head")
                                      : std::string("gqa_split_kv");
                         });

}  // namespace
}  // namespace tandem
