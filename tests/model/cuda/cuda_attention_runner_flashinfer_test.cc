// The CUDA backend's AttentionRunner with TANDEM_CUDA_ATTENTION=flashinfer
// (model/cuda/attention_runner.h): supported shapes run FlashInfer and match the CPU kernel;
// the per-step plan is reused across layers and rebuilt when the row metadata or the DCP rank
// changes; an f32 pool falls back to the per-head kernel (exact within fp32 ulps). Skipped
// visibly without a GPU or without FlashInfer in the binary.
//
// Tolerances: as derived in tests/attention/cuda/cuda_flashinfer_attention_test.cc — queries
// representable in the KV dtype, so |Δo| ≤ (3u + 1e-5)·max|v| (u = 2^-9 for bf16) and
// |Δlse| ≤ 2e-5·max(1, |lse|); the per-head fallback on f32 KV within 2e-5 likewise; rows
// without keys exactly 0 / −inf.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "attention/kv_dtype.h"
#include "gtest/gtest.h"
#include "model/cuda/attention_runner.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/attention/cuda/flashinfer_cuda_test.h"

namespace tandem {
namespace {

using testing::DeviceArray;
using testing::DeviceBytes;

constexpr int32_t kKvHeads = 3;
constexpr int32_t kQHeads = 9;  // SmolLM2's GQA 3
constexpr int32_t kHeadDim = 64;
constexpr int32_t kBlock = 16;
constexpr int64_t kBlocks = 24;

class CudaAttentionRunnerFlashInferTest : public testing::FlashInferCudaTest {
 protected:
  void SetUp() override {
    testing::FlashInferCudaTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(setenv("TANDEM_CUDA_ATTENTION", "flashinfer", 1), 0);
    absl::StatusOr<std::unique_ptr<gpu::AttentionRunner>> r =
        gpu::AttentionRunner::Create(0, nullptr, absl::Seconds(30));
    ASSERT_TRUE(r.ok()) << r.status();
    runner_ = std::move(r).value();
  }
  void TearDown() override { unsetenv("TANDEM_CUDA_ATTENTION"); }

  // Fills both layers of a pool for every token of every request (positions 0..len−1) on the
  // CPU, for `rank` of `dcp`, and returns the bytes.
  std::vector<uint8_t> MakePool(const PoolGeometry& g, const DcpGeometry& dcp, int32_t rank) {
    std::vector<uint8_t> pool(PoolBytes(g, kBlocks), 0xff);
    const KvPoolView view{pool.data(), kBlocks, g};
    std::normal_distribution<float> dist(0.f, 1.f);
    for (int32_t r = 0; r < static_cast<int32_t>(lengths_.size()); ++r) {
      const int64_t len = lengths_[r];
      std::vector<int64_t> positions(len), slots(len);
      std::iota(positions.begin(), positions.end(), int64_t{0});
      const std::vector<int32_t> request(len, r);
      EXPECT_TRUE(
          ComputeSlotMapping(dcp, rank, positions, request, Tables(), absl::MakeSpan(slots)).ok());
      for (int32_t layer = 0; layer < g.num_layers; ++layer) {
        std::vector<float> k(len * kKvHeads * kHeadDim), v(k.size());
        for (float& x : k) x = dist(rng_);
        for (float& x : v) x = dist(rng_);
        for (float x : v) vmax_ = std::max(vmax_, std::abs(double{x}));
        WriteKvCache(view, layer, slots.data(), len, k.data(), v.data());
      }
    }
    return pool;
  }

  BlockTablesView Tables() const {
    return BlockTablesView{ids_.data(), offsets_.data(), static_cast<int32_t>(lengths_.size())};
  }

  // Runs the runner and the CPU kernel on the same rows and compares (bound: see the header).
  void Check(const PoolGeometry& g, const std::vector<uint8_t>& pool, DeviceBytes& dpool,
             int32_t layer, const AttentionRows& rows, double out_bound) {
    const int64_t items = rows.num_rows * kQHeads;
    std::vector<float> q(items * kHeadDim);
    std::normal_distribution<float> dist(0.f, 1.f);
    for (float& x : q) {
      x = dist(rng_);
      if (g.dtype == KvDType::kBF16) x = Bf16ToFloat(FloatToBf16(x));
    }
    std::vector<float> want(items * kHeadDim), want_lse(items);
    const KvPoolView cpu_view{const_cast<uint8_t*>(pool.data()), kBlocks, g};
    PagedAttention(cpu_view, layer, rows, q.data(), kQHeads, 0.125f, want.data(), want_lse.data());
    DeviceArray<float> dq(q), out(items * kHeadDim), lse(items);
    out.Fill(0xff);
    lse.Fill(0xff);
    const absl::Status s = runner_->Attention(KvPoolView{dpool.data(), kBlocks, g}, layer, rows,
                                              dq.get(), kQHeads, 0.125f, out.get(), lse.get());
    ASSERT_TRUE(s.ok()) << s;
    testing::SyncDevice();
    const std::vector<float> got = out.Download(), got_lse = lse.Download();
    for (int64_t it = 0; it < items; ++it) {
      if (want_lse[it] == -INFINITY) {
        ASSERT_EQ(got_lse[it], -INFINITY) << "item " << it;
        for (int32_t x = 0; x < kHeadDim; ++x) ASSERT_EQ(got[it * kHeadDim + x], 0.f);
        continue;
      }
      ASSERT_LE(std::abs(got_lse[it] - want_lse[it]),
                2e-5 * std::max(1.0, std::abs(double{want_lse[it]})))
          << "item " << it;
      for (int32_t x = 0; x < kHeadDim; ++x) {
        ASSERT_LE(std::abs(got[it * kHeadDim + x] - want[it * kHeadDim + x]), out_bound)
            << "item " << it << " dim " << x;
      }
    }
  }

  std::unique_ptr<gpu::AttentionRunner> runner_;
  std::mt19937_64 rng_{4242};
  double vmax_ = 0;
  // Three requests; block ids interleaved across requests.
  std::vector<int64_t> lengths_ = {70, 33, 150};
  std::vector<int32_t> ids_ = {0, 3, 6, 9, 12, 1, 4, 7, 2, 5, 8, 10, 11, 13, 14, 15, 16, 17, 18};
  std::vector<int64_t> offsets_ = {0, 5, 8, 19};
};

TEST_F(CudaAttentionRunnerFlashInferTest, PrefillAndDecodeAcrossLayersAndRanks) {
  const PoolGeometry g{kKvHeads, 2, kBlock, kHeadDim, KvDType::kBF16};
  // Prefill run of request 0, a decode row of request 1, padding, a chunk of request 2.
  std::vector<int32_t> request;
  std::vector<int64_t> position;
  for (int64_t p = 0; p < 70; ++p) {
    request.push_back(0);
    position.push_back(p);
  }
  request.push_back(1);
  position.push_back(32);
  request.push_back(0);
  position.push_back(-1);
  for (int64_t p = 113; p < 150; ++p) {
    request.push_back(2);
    position.push_back(p);
  }
  const double bound = (3 * 0x1p-9 + 1e-5);
  for (const DcpGeometry dcp : {DcpGeometry{kBlock, 1, 1}, DcpGeometry{kBlock, 2, 1}}) {
    for (int32_t rank = 0; rank < dcp.dcp; ++rank) {
      SCOPED_TRACE("dcp " + std::to_string(dcp.dcp) + " rank " + std::to_string(rank));
      const std::vector<uint8_t> pool = MakePool(g, dcp, rank);
      DeviceBytes dpool(pool.size());
      dpool.Upload(pool.data(), pool.size());
      const AttentionRows rows{static_cast<int64_t>(position.size()),
                               request.data(),
                               position.data(),
                               Tables(),
                               dcp,
                               rank};
      // Both layers with unchanged metadata: the second reuses the plan.
      for (int32_t layer : {1, 0}) {
        Check(g, pool, dpool, layer, rows, bound * vmax_);
        if (HasFatalFailure()) return;
      }
      // Changed metadata (decode rows only): re-planned.
      const std::vector<int32_t> dreq = {2, 0, 1};
      const std::vector<int64_t> dpos = {149, 69, 32};
      const AttentionRows decode{3, dreq.data(), dpos.data(), Tables(), dcp, rank};
      Check(g, pool, dpool, 1, decode, bound * vmax_);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(CudaAttentionRunnerFlashInferTest, F32PoolFallsBackToThePerHeadKernel) {
  const PoolGeometry g{kKvHeads, 2, kBlock, kHeadDim, KvDType::kF32};
  const DcpGeometry dcp{kBlock, 1, 1};
  const std::vector<uint8_t> pool = MakePool(g, dcp, 0);
  DeviceBytes dpool(pool.size());
  dpool.Upload(pool.data(), pool.size());
  const std::vector<int32_t> req = {0, 1, 2};
  const std::vector<int64_t> pos = {69, 32, 149};
  const AttentionRows rows{3, req.data(), pos.data(), Tables(), dcp, 0};
  Check(g, pool, dpool, 1, rows, 2e-5 * vmax_);
}

// bf16 activations (ActivationDType::kBF16: q, k, v and out hold bf16 bits): FlashInfer reads
// q and writes out in place over a bf16 pool, converts through scratch over an f16 pool, and the
// per-head fallback (f32 pool) reads and writes bf16 itself. Each must give exactly the f32
// path's output rounded once to bf16 (the kernels see the same q bits) and the same LSE; the KV
// write from bf16 rows must leave the same pool bytes as from their f32 widening.
TEST_F(CudaAttentionRunnerFlashInferTest, Bf16ActivationsGiveTheF32PathRoundedOnce) {
  const DcpGeometry dcp{kBlock, 1, 1};
  const std::vector<int32_t> req = {0, 0, 0, 1, 0, 2};
  const std::vector<int64_t> pos = {66, 67, 68, 32, -1, 149};
  const AttentionRows rows{
      static_cast<int64_t>(req.size()), req.data(), pos.data(), Tables(), dcp, 0};
  const int64_t items = rows.num_rows * kQHeads;
  for (KvDType dtype : {KvDType::kBF16, KvDType::kF16, KvDType::kF32}) {
    SCOPED_TRACE(KvDTypeName(dtype));
    const PoolGeometry g{kKvHeads, 2, kBlock, kHeadDim, dtype};
    const std::vector<uint8_t> pool = MakePool(g, dcp, 0);
    DeviceBytes dpool(pool.size());
    dpool.Upload(pool.data(), pool.size());
    const KvPoolView view{dpool.data(), kBlocks, g};
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<float> q(items * kHeadDim);
    std::vector<uint16_t> q16(q.size());
    for (size_t i = 0; i < q.size(); ++i) q[i] = Bf16ToFloat(q16[i] = FloatToBf16(dist(rng_)));
    DeviceArray<float> dq(q), out(items * kHeadDim), lse(items);
    DeviceArray<uint16_t> dq16(q16), out16(items * kHeadDim);
    DeviceArray<float> lse16(items);
    out16.Fill(0xff);
    ASSERT_TRUE(
        runner_->Attention(view, 1, rows, dq.get(), kQHeads, 0.125f, out.get(), lse.get()).ok());
    ASSERT_TRUE(runner_
                    ->Attention(view, 1, rows, reinterpret_cast<const float*>(dq16.get()), kQHeads,
                                0.125f, reinterpret_cast<float*>(out16.get()), lse16.get(),
                                ActivationDType::kBF16)
                    .ok());
    testing::SyncDevice();
    const std::vector<float> want = out.Download(), want_lse = lse.Download();
    const std::vector<uint16_t> got = out16.Download();
    const std::vector<float> got_lse = lse16.Download();
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], FloatToBf16(want[i])) << "out element " << i;
    }
    for (int64_t i = 0; i < items; ++i) {
      ASSERT_EQ(std::memcmp(&got_lse[i], &want_lse[i], sizeof(float)), 0) << "lse item " << i;
    }

    // KV write: bf16 rows vs the same values as f32, into two copies of the pool.
    const int64_t m = 4;
    const std::vector<int64_t> slots = {5, -1, 17, 40};
    std::vector<uint16_t> kv16(2 * m * kKvHeads * kHeadDim);
    std::vector<float> kv(kv16.size());
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = Bf16ToFloat(kv16[i] = FloatToBf16(dist(rng_)));
    DeviceArray<float> dkv(kv);
    DeviceArray<uint16_t> dkv16(kv16);
    DeviceBytes p32(pool.size()), p16(pool.size());
    p32.Upload(pool.data(), pool.size());
    p16.Upload(pool.data(), pool.size());
    const int64_t half = m * kKvHeads * kHeadDim;
    ASSERT_TRUE(runner_
                    ->WriteKv(KvPoolView{p32.data(), kBlocks, g}, 0, slots.data(), m, dkv.get(),
                              dkv.get() + half)
                    .ok());
    const auto* k16 = reinterpret_cast<const float*>(dkv16.get());
    const auto* v16 = reinterpret_cast<const float*>(dkv16.get() + half);
    ASSERT_TRUE(runner_
                    ->WriteKv(KvPoolView{p16.data(), kBlocks, g}, 0, slots.data(), m, k16, v16,
                              ActivationDType::kBF16)
                    .ok());
    testing::SyncDevice();
    std::vector<uint8_t> b32(pool.size()), b16(pool.size());
    p32.Download(b32.data(), b32.size());
    p16.Download(b16.data(), b16.size());
    ASSERT_EQ(b16, b32) << "pool bytes after the bf16 KV write";
    ASSERT_NE(b32, pool) << "the write changed nothing";
  }
}

}  // namespace
}  // namespace tandem
