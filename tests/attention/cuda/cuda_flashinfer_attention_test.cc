// The FlashInfer attention path (attention/cuda/flashinfer/) against the exact CPU kernel
// (attention/cpu/paged_attention.h) rank by rank, and its merge (LaunchFlashInferMerge) of the
// ranks' partials against the dense double-precision reference, over DCP groups of 1, 2 and 4:
// decode rows (FlashInfer's batch decode, with and without key partition), causal prefill runs
// (its batch prefill, DCP 1) and per-row prefill under DCP, padding rows and empty requests.
// Skipped visibly without a GPU, and with the reason when the binary has no FlashInfer.
//
// Derived tolerances. The queries are made exactly representable in the KV dtype (the wrapper's
// narrowing of q is then exact; the narrowing itself is kv_dtype.h's tested RNE), so the
// scores are exact products accumulated in fp32, as on the CPU. What remains, with u the
// dtype's unit roundoff (bf16 2^-9, f16 2^-12):
//   * FlashInfer writes out in the KV dtype: ≤ u·|o| ≤ u·max|v|;
//   * its prefill multiplies the probabilities in the KV dtype (P·V on tensor cores): each
//     weight off by ≤ u relative, so ≤ u·Σp|v| ≤ u·max|v|;
//   * a partitioned decode stores its partials in the KV dtype before merging: ≤ u·max|v|;
//   * fp32 accumulation order, ex2/lg2.approx (rel. error < 2^-21) and the base conversion:
//     below 1e-5 relative.
// So per element |o − o_cpu| ≤ 3·u·max|v| + 1e-5·max|v|, and |lse − lse_cpu| ≤
// 2e-5·max(1, |lse|); empty items exactly out 0 and lse −inf. The merge adds the merge's own
// ulps (cuda_test_util.h Fp32MergeBound, ×4 for the approximate exp2/log2 and pairwise order).
// A wrong slot, head, layer, rank or mask moves outputs by O(max|v|) on short contexts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "attention/cuda/flashinfer/flashinfer_plan.h"
#include "attention/kv_dtype.h"
#include "attention/lse_merge.h"
#include "gtest/gtest.h"
#include "tests/attention/cpu/attention_harness.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/attention/cuda/flashinfer_cuda_test.h"

namespace tandem {
namespace {

namespace fp = gpu::flashinfer_plan;
using testing::AddDecodeRequest;
using testing::AddPaddingRow;
using testing::AddPrefillRequest;
using testing::AttentionCase;
using testing::AttentionData;
using testing::DeviceArray;
using testing::DeviceBytes;

constexpr int32_t kLayer = 1;  // attended; layer 0 holds K and V swapped

double UnitRoundoff(KvDType t) { return t == KvDType::kBF16 ? 0x1p-9 : 0x1p-12; }

float RoundToDtype(float x, KvDType t) {
  return t == KvDType::kBF16 ? Bf16ToFloat(FloatToBf16(x)) : HalfToFloat(FloatToHalf(x));
}

class CudaFlashInferAttentionTest : public testing::FlashInferCudaTest {
 protected:
  AttentionCase NewCase(DcpGeometry dcp, int32_t kv_heads, int32_t group, int32_t head_dim,
                        KvDType dtype) {
    return testing::MakeCase(dcp, kv_heads, group, head_dim, dtype, rng_());
  }

  // Runs `c` on every rank through the FlashInfer path, compares each rank with the CPU kernel
  // and the FlashInfer merge with the dense reference. `want_kernel` is the kernel the plan
  // must choose on every rank; `want_partition` whether decode partitions keys on rank 0.
  void Check(const AttentionCase& c, fp::FlashInferKernel want_kernel, bool want_partition) {
    SCOPED_TRACE(c.Describe());
    AttentionData d = testing::MakeData(c);
    for (float& x : d.q) x = RoundToDtype(x, c.dtype);
    const testing::DenseOutput ref = testing::DenseReference(c, d);
    double vmax = 0;
    for (const auto& v : d.v_ref) {
      for (double x : v) vmax = std::max(vmax, std::abs(x));
    }
    const double out_bound = (3 * UnitRoundoff(c.dtype) + 1e-5) * vmax;
    const PoolGeometry g{c.num_kv_heads, 2, c.dcp.block_size, c.head_dim, c.dtype};
    const int32_t hq = c.num_q_heads();
    const int32_t n = c.dcp.dcp;
    const int64_t items = c.num_rows() * hq;
    const int64_t out_floats = items * c.head_dim;
    const BlockTablesView tables{d.table_ids.data(), d.table_offsets.data(),
                                 static_cast<int32_t>(c.kv_len.size())};
    DeviceArray<float> q(d.q);
    std::vector<float> parts_out, parts_lse;  // [n][items][D], [n][items]
    for (int32_t rank = 0; rank < n; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      // The rank's pool, written by the CPU kernel and copied to the GPU.
      const int64_t pool_bytes = PoolBytes(g, d.num_blocks);
      std::vector<uint8_t> pool(pool_bytes, 0xff);  // NaN in every dtype
      const KvPoolView cpu_view{pool.data(), d.num_blocks, g};
      for (int32_t r = 0; r < static_cast<int32_t>(c.kv_len.size()); ++r) {
        const int64_t len = c.kv_len[r];
        if (len == 0) continue;
        std::vector<int64_t> positions(len), slots(len);
        std::iota(positions.begin(), positions.end(), int64_t{0});
        const std::vector<int32_t> request(len, r);
        ASSERT_TRUE(
            ComputeSlotMapping(c.dcp, rank, positions, request, tables, absl::MakeSpan(slots))
                .ok());
        WriteKvCache(cpu_view, kLayer, slots.data(), len, d.k[r].data(), d.v[r].data());
        WriteKvCache(cpu_view, 0, slots.data(), len, d.v[r].data(), d.k[r].data());
      }
      DeviceBytes gpu_pool(pool_bytes);
      gpu_pool.Upload(pool.data(), pool_bytes);
      const AttentionRows rows{
          c.num_rows(), c.row_request.data(), c.row_position.data(), tables, c.dcp, rank};
      ASSERT_TRUE(ValidateAttentionCall(cpu_view, kLayer, rows, hq).ok());
      std::vector<float> cpu_out(out_floats), cpu_lse(items);
      PagedAttention(cpu_view, kLayer, rows, d.q.data(), hq, d.scale, cpu_out.data(),
                     cpu_lse.data());

      // The runner's planning, then the launch.
      ASSERT_TRUE(fp::ChoosePath(true, true, fp::ShapeOf(g, hq)).flashinfer);
      const absl::StatusOr<fp::PagedKvBatch> batch = fp::BuildPagedKvBatch(rows, true);
      ASSERT_TRUE(batch.ok()) << batch.status();
      const fp::FlashInferKernel kernel = fp::ChooseKernel(*batch);
      ASSERT_EQ(kernel, n > 1 ? fp::FlashInferKernel::kDecode : want_kernel);
      fp::DecodeWork dw;
      fp::PrefillWork pw;
      if (kernel == fp::FlashInferKernel::kDecode) {
        dw = fp::PlanDecodeWork(*batch, g.num_kv_heads, g.block_size);
        if (rank == 0 && n == 1) {
          ASSERT_EQ(dw.partition_kv, want_partition);
        }
      } else {
        pw = fp::PlanPrefillWork(*batch, c.group_size, fp::kPrefillCtaTileQ);
      }
      std::vector<int32_t> blob;
      const fp::PackedPlan layout = fp::PackPlan(*batch, dw, pw, blob);
      DeviceArray<int32_t> dplan(blob);
      DeviceBytes scratch(static_cast<size_t>(
          std::max<int64_t>(16, gpu::FlashInferScratchBytes(g, hq, c.num_rows(), dw))));
      DeviceArray<float> out(out_floats), lse(items);
      out.Fill(0xff);
      lse.Fill(0xff);
      gpu::FlashInferAttentionArgs a;
      a.pool = KvPoolView{gpu_pool.data(), d.num_blocks, g};
      a.layer = kLayer;
      a.num_rows = c.num_rows();
      a.q = q.get();
      a.num_q_heads = hq;
      a.scale = d.scale;
      a.out = out.get();
      a.lse = lse.get();
      a.kernel = kernel;
      a.num_sequences = batch->num_sequences();
      a.num_ctas = kernel == fp::FlashInferKernel::kDecode ? dw.num_ctas() : pw.num_ctas();
      a.partition_kv = dw.partition_kv;
      a.plan = dplan.get();
      a.layout = layout;
      a.scratch = scratch.data();
      const absl::Status launched = gpu::LaunchFlashInferAttention(a, nullptr);
      ASSERT_TRUE(launched.ok()) << launched;
      testing::SyncDevice();
      const std::vector<float> gout = out.Download(), glse = lse.Download();
      for (int64_t it = 0; it < items; ++it) {
        if (cpu_lse[it] == -INFINITY) {
          ASSERT_EQ(glse[it], -INFINITY) << "item " << it;
          for (int32_t x = 0; x < c.head_dim; ++x) ASSERT_EQ(gout[it * c.head_dim + x], 0.f);
          continue;
        }
        ASSERT_LE(std::abs(glse[it] - cpu_lse[it]),
                  2e-5 * std::max(1.0, std::abs(double{cpu_lse[it]})))
            << "item " << it;
        for (int32_t x = 0; x < c.head_dim; ++x) {
          ASSERT_LE(std::abs(gout[it * c.head_dim + x] - cpu_out[it * c.head_dim + x]), out_bound)
              << "item " << it << " dim " << x;
        }
      }
      parts_out.insert(parts_out.end(), gout.begin(), gout.end());
      parts_lse.insert(parts_lse.end(), glse.begin(), glse.end());
    }

    // FlashInfer's merge_state over the ranks == the dense reference.
    DeviceArray<float> dparts(parts_out), dlse(parts_lse);
    DeviceArray<float> merged(out_floats), merged_lse(items);
    DeviceArray<float> scratch(
        static_cast<size_t>(gpu::FlashInferMergeScratchFloats(n, std::max<int64_t>(items, 1))));
    const absl::Status merged_ok =
        gpu::LaunchFlashInferMerge(n, dparts.get(), dlse.get(), items, c.head_dim, merged.get(),
                                   merged_lse.get(), scratch.get(), nullptr);
    ASSERT_TRUE(merged_ok.ok()) << merged_ok;
    testing::SyncDevice();
    const std::vector<float> mout = merged.Download(), mlse = merged_lse.Download();
    for (int64_t it = 0; it < items; ++it) {
      if (std::isinf(ref.lse[it])) {
        ASSERT_EQ(mlse[it], -INFINITY) << "item " << it;
        for (int32_t x = 0; x < c.head_dim; ++x) ASSERT_EQ(mout[it * c.head_dim + x], 0.f);
        continue;
      }
      const float l = static_cast<float>(ref.lse[it]);
      ASSERT_LE(std::abs(mlse[it] - ref.lse[it]),
                2e-5 * std::max(1.0, std::abs(ref.lse[it])) + 4 * testing::Fp32MergeBound(n, l, 1))
          << "item " << it;
      for (int32_t x = 0; x < c.head_dim; ++x) {
        ASSERT_LE(std::abs(mout[it * c.head_dim + x] - ref.out[it * c.head_dim + x]),
                  out_bound + 4 * testing::Fp32MergeBound(n, l, vmax))
            << "item " << it << " dim " << x;
      }
    }
  }

  std::mt19937_64 rng_{20261202};
};

// Decode rows at edge contexts (0, 1, B−1, B·N, B·N+1, random), a padding row and a request
// absent from the call, for both dtypes and head dims, GQA 1/4/8, DCP 1, 2 and 4.
TEST_F(CudaFlashInferAttentionTest, DecodeAcrossShapesAndDcp) {
  const int32_t b = 16;
  int index = 0;
  for (KvDType dtype : {KvDType::kBF16, KvDType::kF16}) {
    for (int32_t head_dim : {64, 128}) {
      for (auto [n, interleave] :
           std::vector<std::pair<int32_t, int32_t>>{{1, 1}, {2, 1}, {4, b}, {4, 2}}) {
        const int32_t group = std::vector<int32_t>{1, 4, 8}[index % 3];
        AttentionCase c =
            NewCase(DcpGeometry{b, n, interleave}, 1 + index % 2, group, head_dim, dtype);
        for (int64_t ctx : {0, 1, b - 1, b * n, b * n + 1}) AddDecodeRequest(c, ctx);
        AddDecodeRequest(c, static_cast<int64_t>(rng_() % 250));  // ≤ 256 keys: unpartitioned
        AddPaddingRow(c);
        c.kv_len.push_back(0);
        Check(c, fp::FlashInferKernel::kDecode, false);
        if (HasFatalFailure()) return;
        ++index;
      }
    }
  }
}

// One long decode row: few CTAs, so the plan partitions the keys and FlashInfer merges the
// tiles itself (its partials in the KV dtype).
TEST_F(CudaFlashInferAttentionTest, PartitionedDecode) {
  for (KvDType dtype : {KvDType::kBF16, KvDType::kF16}) {
    AttentionCase c = NewCase(DcpGeometry{16, 1, 1}, 2, 4, 128, dtype);
    AddDecodeRequest(c, 3000);
    Check(c, fp::FlashInferKernel::kDecode, true);
    if (HasFatalFailure()) return;
  }
}

// Causal prefill runs (a whole prompt, a chunk after cached tokens) beside a decode row and a
// padding row: FlashInfer's batch prefill without DCP; under DCP 2 and 4 every row is its own
// decode sequence and the ranks' partials are merged.
TEST_F(CudaFlashInferAttentionTest, PrefillAndDcpSplitMerge) {
  for (KvDType dtype : {KvDType::kBF16, KvDType::kF16}) {
    for (int32_t head_dim : {64, 128}) {
      for (int32_t n : {1, 2, 4}) {
        AttentionCase c = NewCase(DcpGeometry{16, n, 1}, 2, n == 2 ? 3 : 4, head_dim, dtype);
        AddPrefillRequest(c, 70, 70);
        AddDecodeRequest(c, 33);
        AddPaddingRow(c);
        AddPrefillRequest(c, 150, 37);
        Check(c, fp::FlashInferKernel::kPrefill, false);
        if (HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace tandem
