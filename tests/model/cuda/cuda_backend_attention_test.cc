// The CUDA backend's WriteKv, Attention and CorrectPartial against the CPU backend, through the
// ComputeBackend interface with host metadata exactly as the forward pass passes it: one rank
// of a DCP group, padding rows, repeated calls with unchanged metadata (served from the upload
// cache) and changed metadata, and invalid metadata rejected before anything runs.
//
// Tolerances: pools byte-identical; attention output relative L2 error and |Δlse|/max(1,|lse|)
// at most 2e-5 per (row, head) (fp32 accumulation in different orders over identical K/V);
// padding rows exactly zeros/−inf; CorrectPartial within 1e-6 relative.
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "attention/dcp_layout.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_backend.h"
#include "model/cuda/cuda_backend.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/model/cuda/backend_test_util.h"

namespace tandem {
namespace {

using testing::Get;
using testing::Put;
using testing::RandomFloats;

constexpr int32_t kHeadDim = 64;
constexpr int32_t kKvHeads = 2;
constexpr int32_t kQHeads = 6;
constexpr int32_t kLayers = 3;
constexpr int64_t kBlocks = 12;
const DcpGeometry kDcp{8, 2, 2};
constexpr int32_t kRank = 1;

struct Side {
  ComputeBackend* backend;
  std::unique_ptr<DeviceBuffer> pool;
  KvPoolView view;
};

class CudaBackendAttentionTest : public testing::CudaTest,
                                 public ::testing::WithParamInterface<KvDType> {
 protected:
  void SetUp() override {
    testing::CudaTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<std::unique_ptr<ComputeBackend>> b = CreateCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    gpu_ = std::move(b).value();
    cpu_ = CreateCpuBackend();
    geometry_ = PoolGeometry{kKvHeads, kLayers, kDcp.block_size, kHeadDim, GetParam()};
    const std::vector<uint8_t> nan_bytes(PoolBytes(geometry_, kBlocks), 0xff);
    for (ComputeBackend* be : {cpu_.get(), gpu_.get()}) {
      Side s{be, Put(*be, nan_bytes), {}};
      s.view = KvPoolView{s.pool->data(), kBlocks, geometry_};
      sides_.push_back(std::move(s));
    }
    // Three requests with shuffled block tables.
    std::vector<int32_t> ids(kBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    offsets_ = {0};
    for (int64_t len : lengths_) {
      const int64_t need = VirtualBlocksFor(kDcp, len);
      table_ids_.insert(table_ids_.end(), ids.begin() + offsets_.back(),
                        ids.begin() + offsets_.back() + need);
      offsets_.push_back(offsets_.back() + need);
    }
  }

  BlockTablesView Tables() const {
    return BlockTablesView{table_ids_.data(), offsets_.data(),
                           static_cast<int32_t>(lengths_.size())};
  }

  // Writes every position of every request in every layer, on both sides, in one call per layer.
  void WriteAll() {
    std::vector<int64_t> positions, slots;
    std::vector<int32_t> request;
    for (int32_t r = 0; r < static_cast<int32_t>(lengths_.size()); ++r) {
      for (int64_t p = 0; p < lengths_[r]; ++p) {
        positions.push_back(p);
        request.push_back(r);
      }
    }
    slots.resize(positions.size());
    ASSERT_TRUE(
        ComputeSlotMapping(kDcp, kRank, positions, request, Tables(), absl::MakeSpan(slots)).ok());
    const int64_t m = static_cast<int64_t>(slots.size());
    for (int32_t layer = 0; layer < kLayers; ++layer) {
      const std::vector<float> k = RandomFloats(m * kKvHeads * kHeadDim, 10 + layer);
      const std::vector<float> v = RandomFloats(m * kKvHeads * kHeadDim, 20 + layer);
      for (Side& s : sides_) {
        auto bk = Put(*s.backend, k), bv = Put(*s.backend, v);
        ASSERT_TRUE(s.backend->WriteKv(s.view, layer, slots.data(), m, bk->f32(), bv->f32()).ok());
      }
    }
    const int64_t bytes = PoolBytes(geometry_, kBlocks);
    EXPECT_EQ(Get<uint8_t>(*gpu_, *sides_[1].pool, bytes),
              Get<uint8_t>(*cpu_, *sides_[0].pool, bytes))
        << "pools differ after WriteKv";
  }

  // Runs Attention on both sides and compares.
  void CheckAttention(int32_t layer, const std::vector<int32_t>& request,
                      const std::vector<int64_t>& position) {
    const int64_t rows = static_cast<int64_t>(position.size());
    const AttentionRows arows{rows, request.data(), position.data(), Tables(), kDcp, kRank};
    const std::vector<float> q = RandomFloats(rows * kQHeads * kHeadDim, 77 + rows, 2.f);
    std::vector<std::vector<float>> out, lse;
    for (Side& s : sides_) {
      auto bq = Put(*s.backend, q);
      auto bo = Put(*s.backend, std::vector<float>(rows * kQHeads * kHeadDim, std::nanf("")));
      auto bl = Put(*s.backend, std::vector<float>(rows * kQHeads, std::nanf("")));
      const absl::Status st = s.backend->Attention(s.view, layer, arows, bq->f32(), kQHeads, 0.125f,
                                                   bo->f32(), bl->f32());
      ASSERT_TRUE(st.ok()) << st;
      out.push_back(Get<float>(*s.backend, *bo, rows * kQHeads * kHeadDim));
      lse.push_back(Get<float>(*s.backend, *bl, rows * kQHeads));
    }
    for (int64_t item = 0; item < rows * kQHeads; ++item) {
      const float want_lse = lse[0][item];
      if (want_lse == -INFINITY) {
        ASSERT_EQ(lse[1][item], -INFINITY) << "item " << item;
        for (int32_t x = 0; x < kHeadDim; ++x) ASSERT_EQ(out[1][item * kHeadDim + x], 0.f);
        continue;
      }
      double diff = 0, norm = 0;
      for (int32_t x = 0; x < kHeadDim; ++x) {
        const double a = out[1][item * kHeadDim + x], b = out[0][item * kHeadDim + x];
        diff += (a - b) * (a - b);
        norm += b * b;
      }
      ASSERT_LE(std::sqrt(diff / std::max(norm, 1e-60)), 2e-5) << "item " << item;
      ASSERT_LE(std::abs(lse[1][item] - want_lse) / std::max(1.f, std::abs(want_lse)), 2e-5)
          << "item " << item;
    }
  }

  std::mt19937_64 rng_{5};
  std::unique_ptr<ComputeBackend> gpu_, cpu_;
  PoolGeometry geometry_;
  std::vector<Side> sides_;
  std::vector<int64_t> lengths_ = {30, 5, 17};
  std::vector<int32_t> table_ids_;
  std::vector<int64_t> offsets_;
};

TEST_P(CudaBackendAttentionTest, DecodePrefillAndPaddingRowsMatchCpu) {
  WriteAll();
  if (HasFatalFailure()) return;
  // Decode rows, padding rows (request 0, position −1, as RankModel pads) and a prefill chunk.
  std::vector<int32_t> request = {0, 1, 0, 2, 0, 2, 2, 2};
  std::vector<int64_t> position = {29, 4, -1, 16, -1, 10, 11, 12};
  CheckAttention(1, request, position);
  // Same metadata again (upload cache hit), on other layers.
  CheckAttention(2, request, position);
  CheckAttention(0, request, position);
  // Changed metadata (re-validated and re-uploaded), then the first again.
  CheckAttention(1, {1, 2}, {3, 16});
  CheckAttention(1, request, position);
}

TEST_P(CudaBackendAttentionTest, InvalidMetadataIsRejectedBeforeLaunch) {
  WriteAll();
  if (HasFatalFailure()) return;
  const std::vector<int32_t> request = {0};
  const std::vector<int64_t> position = {29};
  std::vector<int32_t> bad_ids = table_ids_;
  bad_ids[0] = static_cast<int32_t>(kBlocks);  // outside the pool
  const AttentionRows rows{
      1,    request.data(), position.data(), BlockTablesView{bad_ids.data(), offsets_.data(), 3},
      kDcp, kRank};
  auto bq = Put(*gpu_, std::vector<float>(kQHeads * kHeadDim));
  auto bo = Put(*gpu_, std::vector<float>(kQHeads * kHeadDim));
  auto bl = Put(*gpu_, std::vector<float>(kQHeads));
  absl::Status s =
      gpu_->Attention(sides_[1].view, 1, rows, bq->f32(), kQHeads, 0.125f, bo->f32(), bl->f32());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      s.message().find("block id 12 at entry 0 of request 0's block table is outside the pool"),
      std::string::npos)
      << s;
  const std::vector<int64_t> bad_slots = {kBlocks * kDcp.block_size};
  auto bk = Put(*gpu_, std::vector<float>(kKvHeads * kHeadDim));
  s = gpu_->WriteKv(sides_[1].view, 0, bad_slots.data(), 1, bk->f32(), bk->f32());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("slot 96 is outside the pool [0, 96)"), std::string::npos) << s;
  // Nothing was launched: the backend still works and matches the CPU.
  EXPECT_TRUE(gpu_->Synchronize().ok());
  CheckAttention(1, request, position);
}

TEST_P(CudaBackendAttentionTest, CorrectPartialMatchesCpu) {
  const int32_t n = 3, me = 1;
  const int64_t items = 40;
  std::vector<float> all_lse = RandomFloats(n * items, 3, 5.f);
  for (int64_t i = 0; i < n * items; i += 7) all_lse[i] = -INFINITY;
  const std::vector<float> out = RandomFloats(items * kHeadDim, 4);
  std::vector<std::vector<float>> got;
  for (ComputeBackend* b : {cpu_.get(), gpu_.get()}) {
    auto bl = Put(*b, all_lse), bo = Put(*b, out);
    ASSERT_TRUE(b->CorrectPartial(n, me, bl->f32(), items, kHeadDim, bo->f32()).ok());
    got.push_back(Get<float>(*b, *bo, out.size()));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(got[1][i], got[0][i], 1e-6 * std::max(1.f, std::abs(got[0][i]))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBackendAttentionTest,
                         ::testing::Values(KvDType::kF32, KvDType::kF16, KvDType::kBF16),
                         [](const ::testing::TestParamInfo<KvDType>& info) {
                           return std::string(KvDTypeName(info.param));
                         });

}  // namespace
}  // namespace tandem
