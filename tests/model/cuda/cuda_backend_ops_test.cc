// Every element-wise op, memory op and GEMM of the CUDA backend against the CPU backend (or, for
// the bf16 GEMM, a double-precision reference on the same bf16-rounded inputs), over odd shapes.
//
// Stated tolerances, per element, scaled by max(1, |reference|):
// * Add, GatherRows, Embedding, Upload/Download/Copy: exact (pure data movement or one f32 add);
// * RmsNorm 2e-6 and Rope 1e-5: both backends use the same double-precision parts and the same
//   float expression order; only libm ulps differ;
// * SiluMul 1e-6: one expf, within 2 ulp on both sides;
// * Linear: |y − y_ref| <= 1e-5 · Σ_j |w_j·x_j| + 1e-6, y_ref in double from the bf16-rounded
//   W and x: what remains is fp32 accumulation order inside cuBLAS. A transposed or mis-strided
//   GEMM misses this by orders of magnitude.
#include <cmath>
#include <vector>

#include "attention/kv_dtype.h"
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

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(static_cast<double>(want[i]))))
        << what << " element " << i;
  }
}

class CudaBackendOpsTest : public testing::CudaTest {
 protected:
  void SetUp() override {
    testing::CudaTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<std::unique_ptr<ComputeBackend>> b = CreateCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    gpu_ = std::move(b).value();
    cpu_ = CreateCpuBackend();
  }

  std::unique_ptr<ComputeBackend> gpu_;
  std::unique_ptr<ComputeBackend> cpu_;
};

TEST_F(CudaBackendOpsTest, IdentifiesItself) {
  EXPECT_EQ(gpu_->name(), "cuda");
  EXPECT_EQ(gpu_->device_key(), "cuda:0");
}

TEST_F(CudaBackendOpsTest, MemoryRoundTripsAndOverlappingCopies) {
  const std::vector<float> data = RandomFloats(100003, 1);
  std::unique_ptr<DeviceBuffer> buf = Put(*gpu_, data);
  EXPECT_EQ(Get<float>(*gpu_, *buf, data.size()), data);
  // Copy has memmove semantics: forward and backward overlaps.
  for (int64_t shift : {1, -1, 1000, -1000}) {
    std::vector<float> want = data;
    const int64_t n = 50000;
    const int64_t from = 20000, to = from + shift;
    std::copy(data.begin() + from, data.begin() + from + n, want.begin() + to);
    std::unique_ptr<DeviceBuffer> b = Put(*gpu_, data);
    ASSERT_TRUE(gpu_->Copy(b->f32() + to, b->f32() + from, n * sizeof(float)).ok());
    EXPECT_EQ(Get<float>(*gpu_, *b, data.size()), want) << "shift " << shift;
  }
  ASSERT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaBackendOpsTest, HugeAllocationIsResourceExhausted) {
  const absl::StatusOr<std::unique_ptr<DeviceBuffer>> b = gpu_->Allocate(int64_t{1} << 50);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
  // The failed allocation must not poison later calls.
  EXPECT_TRUE(gpu_->Allocate(1024).ok());
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaBackendOpsTest, RmsNormMatchesCpu) {
  for (auto [m, n] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 576}, {7, 1000}, {33, 4097}}) {
    const std::vector<float> x = RandomFloats(m * n, m + n, 3.f);
    const std::vector<float> w = RandomFloats(n, 7, 1.f);
    for (bool in_place : {false, true}) {
      std::vector<std::vector<float>> got;
      for (ComputeBackend* b : {cpu_.get(), gpu_.get()}) {
        auto bx = Put(*b, x), bw = Put(*b, w), by = Put(*b, std::vector<float>(m * n));
        float* y = in_place ? bx->f32() : by->f32();
        ASSERT_TRUE(b->RmsNorm(bx->f32(), bw->f32(), m, n, 1e-5f, y).ok());
        got.push_back(Get<float>(*b, in_place ? *bx : *by, m * n));
      }
      ExpectNear(got[1], got[0], 2e-6, "rms_norm m=" + std::to_string(m));
    }
  }
}

// AddRmsNorm (the forward's fused residual add + norm on f32 activations) is Tandem's fused
// kernel here (no TANDEM_CUDA_ATTENTION): bit-identical to Add then RmsNorm on the same GPU,
// in place (out = x) and not; the CPU within RmsNorm's 2e-6.
TEST_F(CudaBackendOpsTest, AddRmsNormIsAddThenRmsNormBitForBit) {
  EXPECT_TRUE(gpu_->PrefersAddRmsNorm());
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 576}, {33, 4097}}) {
    const std::vector<float> x = RandomFloats(m * n, m + n, 3.f);
    const std::vector<float> res = RandomFloats(m * n, m * n, 2.f);
    const std::vector<float> w = RandomFloats(n, 7, 1.f);
    auto rx = Put(*gpu_, x), rres = Put(*gpu_, res), bw = Put(*gpu_, w);
    auto rout = Put(*gpu_, std::vector<float>(m * n));
    ASSERT_TRUE(gpu_->Add(rres->f32(), rx->f32(), m * n).ok());
    ASSERT_TRUE(gpu_->RmsNorm(rres->f32(), bw->f32(), m, n, 1e-5f, rout->f32()).ok());
    const std::vector<float> want_res = Get<float>(*gpu_, *rres, m * n);
    const std::vector<float> want = Get<float>(*gpu_, *rout, m * n);
    for (bool in_place : {false, true}) {
      auto bx = Put(*gpu_, x), bres = Put(*gpu_, res), bout = Put(*gpu_, std::vector<float>(m * n));
      float* out = in_place ? bx->f32() : bout->f32();
      ASSERT_TRUE(gpu_->AddRmsNorm(bres->f32(), bx->f32(), bw->f32(), m, n, 1e-5f, out).ok());
      EXPECT_EQ(Get<float>(*gpu_, *bres, m * n), want_res) << "residual m=" << m;
      EXPECT_EQ(Get<float>(*gpu_, in_place ? *bx : *bout, m * n), want) << "out m=" << m;
    }
    std::vector<float> cres = res, cout(m * n);
    ASSERT_TRUE(cpu_->AddRmsNorm(cres.data(), x.data(), w.data(), m, n, 1e-5f, cout.data()).ok());
    ExpectNear(want, cout, 2e-6, "add_rms_norm vs cpu m=" + std::to_string(m));
  }
}

TEST_F(CudaBackendOpsTest, RopeMatchesCpuInBothStyles) {
  const std::vector<int64_t> positions = {0, 1, 17, 4095, 100000, 3};
  const int64_t m = static_cast<int64_t>(positions.size());
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    for (int32_t head_dim : {2, 6, 64, 128}) {
      for (int32_t heads : {1, 3, 9}) {
        const std::vector<float> x = RandomFloats(m * heads * head_dim, head_dim + heads);
        const RopeParams params{style == RopeStyle::kRotateHalf ? 500000.f : 10000.f, style};
        std::vector<std::vector<float>> got;
        for (ComputeBackend* b : {cpu_.get(), gpu_.get()}) {
          auto bx = Put(*b, x);
          ASSERT_TRUE(b->Rope(bx->f32(), m, heads, head_dim, positions.data(), params).ok());
          got.push_back(Get<float>(*b, *bx, x.size()));
        }
        ExpectNear(got[1], got[0], 1e-5,
                   "rope style=" + std::to_string(static_cast<int>(style)) +
                       " head_dim=" + std::to_string(head_dim));
      }
    }
  }
}

// RoPE frequency divisors (Llama 3.x rope_scaling, linear scaling, YaRN's blend) and YaRN's
// magnitude (mscale) in the CUDA kernel's arguments give the CPU table's rotation; and without
// them after a call with them, the plain one (the CPU table rebuilds, the kernel takes no state).
TEST_F(CudaBackendOpsTest, RopeFrequencyFactorsMatchCpu) {
  const std::vector<int64_t> positions = {0, 1, 17, 4095, 100000, 3};
  const int64_t m = static_cast<int64_t>(positions.size());
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    for (int32_t head_dim : {6, 128}) {
      std::vector<float> factors;
      for (int32_t i = 0; i < head_dim / 2; ++i) factors.push_back(1.f + 0.25f * (i % 29));
      for (const float* f :
           {static_cast<const float*>(factors.data()), static_cast<const float*>(nullptr)}) {
        const std::vector<float> x = RandomFloats(m * 3 * head_dim, head_dim);
        const RopeParams params{500000.f, style, f, f != nullptr ? 1.1386f : 1.f};
        std::vector<std::vector<float>> got;
        for (ComputeBackend* b : {cpu_.get(), gpu_.get()}) {
          auto bx = Put(*b, x);
          ASSERT_TRUE(b->Rope(bx->f32(), m, 3, head_dim, positions.data(), params).ok());
          got.push_back(Get<float>(*b, *bx, x.size()));
        }
        ExpectNear(got[1], got[0], 1e-5,
                   "rope factors=" + std::to_string(f != nullptr) +
                       " head_dim=" + std::to_string(head_dim));
      }
    }
  }
}

// The position upload is cached while unchanged: alternating positions must never reuse a stale
// device copy.
TEST_F(CudaBackendOpsTest, RopeWithChangingPositionsNeverReusesStaleOnes) {
  const std::vector<std::vector<int64_t>> sets = {{5, 6, 7}, {5, 6, 8}, {5, 6, 7}, {9}, {5, 6, 7}};
  for (size_t i = 0; i < sets.size(); ++i) {
    const int64_t m = static_cast<int64_t>(sets[i].size());
    const std::vector<float> x = RandomFloats(m * 2 * 64, i);
    std::vector<std::vector<float>> got;
    for (ComputeBackend* b : {cpu_.get(), gpu_.get()}) {
      auto bx = Put(*b, x);
      ASSERT_TRUE(b->Rope(bx->f32(), m, 2, 64, sets[i].data(), RopeParams{}).ok());
      got.push_back(Get<float>(*b, *bx, x.size()));
    }
    ExpectNear(got[1], got[0], 1e-5, "call " + std::to_string(i));
  }
}

TEST_F(CudaBackendOpsTest, SiluMulAndAddMatchCpu) {
  const int64_t n = 100003;
  const std::vector<float> g = RandomFloats(n, 1, 4.f), u = RandomFloats(n, 2);
  std::vector<std::vector<float>> silu, silu_in_place, add;
  for (ComputeBackend* b : {cpu_.get(), gpu_.get()}) {
    auto bg = Put(*b, g), bu = Put(*b, u), bo = Put(*b, std::vector<float>(n));
    ASSERT_TRUE(b->SiluMul(bg->f32(), bu->f32(), n, bo->f32()).ok());
    silu.push_back(Get<float>(*b, *bo, n));
    ASSERT_TRUE(b->SiluMul(bg->f32(), bu->f32(), n, bg->f32()).ok());  // out aliases gate
    silu_in_place.push_back(Get<float>(*b, *bg, n));
    ASSERT_TRUE(b->Add(bu->f32(), bo->f32(), n).ok());
    add.push_back(Get<float>(*b, *bu, n));
  }
  ExpectNear(silu[1], silu[0], 1e-6, "silu_mul");
  ExpectNear(silu_in_place[1], silu_in_place[0], 1e-6, "silu_mul in place");
  ExpectNear(add[1], add[0], 1e-6, "add");
}

TEST_F(CudaBackendOpsTest, GatherAndEmbeddingAreExact) {
  const int64_t rows = 50, cols = 77;
  const std::vector<float> table = RandomFloats(rows * cols, 3);
  const std::vector<int64_t> index = {3, -1, 49, 0, 3, -1};
  const std::vector<int32_t> ids = {7, 0, 49, 7, 12};
  std::vector<std::vector<float>> gathered, embedded;
  for (ComputeBackend* b : {cpu_.get(), gpu_.get()}) {
    auto bt = Put(*b, table);
    auto bo = Put(*b, std::vector<float>(index.size() * cols, 1.f));
    ASSERT_TRUE(b->GatherRows(bt->f32(), index.data(), index.size(), cols, bo->f32()).ok());
    gathered.push_back(Get<float>(*b, *bo, index.size() * cols));
    auto be = Put(*b, std::vector<float>(ids.size() * cols));
    ASSERT_TRUE(b->Embedding(bt->f32(), ids.data(), ids.size(), cols, be->f32()).ok());
    embedded.push_back(Get<float>(*b, *be, ids.size() * cols));
  }
  EXPECT_EQ(gathered[1], gathered[0]);
  EXPECT_EQ(embedded[1], embedded[0]);
}

TEST_F(CudaBackendOpsTest, LinearIsBf16GemmWithFp32Accumulation) {
  struct Shape {
    int64_t m, n, k;
    bool bias;
  };
  for (const Shape& s : std::vector<Shape>{{1, 576, 576, false},
                                           {3, 33, 17, true},
                                           {17, 1536, 576, false},
                                           {64, 49, 130, true},
                                           {5, 1, 1, true}}) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                 " k=" + std::to_string(s.k));
    const std::vector<float> w = RandomFloats(s.n * s.k, s.n, 0.1f);
    const std::vector<float> x = RandomFloats(s.m * s.k, s.k);
    const std::vector<float> bias = RandomFloats(s.n, 99);
    absl::StatusOr<std::unique_ptr<LinearOp>> op =
        gpu_->PrepareLinear(w.data(), s.n, s.k, s.bias ? bias.data() : nullptr);
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ((*op)->n(), s.n);
    EXPECT_EQ((*op)->k(), s.k);
    auto bx = Put(*gpu_, x), by = Put(*gpu_, std::vector<float>(s.m * s.n));
    ASSERT_TRUE(gpu_->Linear(**op, bx->f32(), s.m, by->f32()).ok());
    const std::vector<float> y = Get<float>(*gpu_, *by, s.m * s.n);
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t t = 0; t < s.k; ++t) {
          const double a = Bf16ToFloat(FloatToBf16(x[i * s.k + t]));
          const double c = Bf16ToFloat(FloatToBf16(w[j * s.k + t]));
          ref += a * c;
          mag += std::abs(a * c);
        }
        if (s.bias) ref += bias[j];
        ASSERT_NEAR(y[i * s.n + j], ref, 1e-5 * mag + 1e-6 * std::max(1.0, std::abs(ref)))
            << "y[" << i << "][" << j << "]";
      }
    }
  }
}

// LinearAdd and LinearSiluMul equal the plain GEMM followed by the element-wise op (the CUDA
// backend runs them unfused; the tolerance is the element-wise ops' own, 1e-6).
TEST_F(CudaBackendOpsTest, FusedLinearFormsEqualTheGemmThenTheOp) {
  const int64_t m = 7, n = 33, k = 17;
  const std::vector<float> w = RandomFloats(n * k, 3, 0.1f);
  const std::vector<float> x = RandomFloats(m * k, 4);
  const std::vector<float> y0 = RandomFloats(m * n, 5);
  const std::vector<float> up = RandomFloats(m * n, 6, 2.f);
  absl::StatusOr<std::unique_ptr<LinearOp>> op = gpu_->PrepareLinear(w.data(), n, k, nullptr);
  ASSERT_TRUE(op.ok()) << op.status();
  auto bx = Put(*gpu_, x), by = Put(*gpu_, y0), bup = Put(*gpu_, up);
  auto plain = Put(*gpu_, std::vector<float>(m * n)),
       scratch = Put(*gpu_, std::vector<float>(m * n));
  auto out = Put(*gpu_, std::vector<float>(m * n));
  ASSERT_TRUE(gpu_->Linear(**op, bx->f32(), m, plain->f32()).ok());
  ASSERT_TRUE(gpu_->LinearAdd(**op, bx->f32(), m, by->f32(), scratch->f32()).ok());
  ASSERT_TRUE(gpu_->LinearSiluMul(**op, bx->f32(), m, bup->f32(), out->f32()).ok());
  const std::vector<float> p = Get<float>(*gpu_, *plain, m * n);
  std::vector<float> want_add(m * n), want_silu(m * n);
  for (int64_t i = 0; i < m * n; ++i) {
    want_add[i] = y0[i] + p[i];
    want_silu[i] = p[i] / (1.f + std::exp(-p[i])) * up[i];
  }
  ExpectNear(Get<float>(*gpu_, *by, m * n), want_add, 1e-6, "LinearAdd");
  ExpectNear(Get<float>(*gpu_, *out, m * n), want_silu, 1e-6, "LinearSiluMul");
}

TEST_F(CudaBackendOpsTest, LinearRejectsForeignOps) {
  const std::vector<float> w(4 * 4, 1.f);
  absl::StatusOr<std::unique_ptr<LinearOp>> cpu_op = cpu_->PrepareLinear(w.data(), 4, 4, nullptr);
  ASSERT_TRUE(cpu_op.ok());
  auto bx = Put(*gpu_, std::vector<float>(4)), by = Put(*gpu_, std::vector<float>(4));
  const absl::Status s = gpu_->Linear(**cpu_op, bx->f32(), 1, by->f32());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not prepared by a CUDA backend of this device"), std::string::npos)
      << s;
}

}  // namespace
}  // namespace tandem
