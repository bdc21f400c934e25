// The CUDA backend with bf16 activations (TANDEM_CUDA_ACTIVATIONS=bf16): every op against a
// double-precision reference computed from the same bf16 inputs, within tolerances derived from
// where the op rounds. The weights of the linear tests cover both the cuBLASLt path (16-byte
// rows, bias as an epilogue) and the cublasGemmEx fallback (k = 36, n = 100: bias kernel).
//
// Derivation. u = 2^-8 is bf16's unit roundoff (round to nearest even: |bf16(v) − v| <= u·|v|
// for normal v), e = 2^-24 fp32's. Inputs are bf16 already (rounded on the host), so an op's
// error is what its fp32 arithmetic adds plus the one rounding of its output to bf16:
// * Embedding, GatherRows: data movement (Embedding rounds f32 table values exactly as
//   FloatToBf16 does): exact.
// * Add: fp32 add (<= e·|s|) then bf16 (<= u·|s|(1+e)): |Δ| <= (u + 2e)·|s|.
// * SiluMul: expf (2 ulp), one add, one divide, one multiply in fp32 — <= 6e relative — then the
//   bf16 rounding: |Δ| <= (u + 8e)·|ref| + 1e-30.
// * RmsNorm: the fp32 sum of n squares is within n·e relative, rsqrtf within 2 ulp, so scale is
//   within (n/2 + 3)e; two products add 2e; then bf16: |Δ| <= (u + (n/2 + 6)e)·|ref|.
// * RoPE: cos and sin rounded to fp32 (e each), two products and a sum in fp32: the fp32 result
//   is within 4e·(|a| + |b|)·mscale; the bf16 rounding of that result adds u·(|ref| + that):
//   |Δ| <= u·|ref| + 5e·(|a| + |b|)·mscale.
// * Linear (bf16 out): each product of two bf16 values is exact in fp32; fp32 accumulation over
//   k terms in any order (split-K, tensor-core trees) is within k·e·Σ|w·x|, taken twice for
//   tensor cores' truncating alignment; the bias is bf16 in the epilogue (u·|b|); the output is
//   rounded once: |Δ| <= u·|ref| + u·|b| + 2k·e·(Σ|w·x| + |b|), scaled by (1 + u).
// * LinearAdd (y += ..., beta = 1): the same with |ref| the sum and y exact on input.
// * LinearF32Out: no output rounding and an f32 bias: |Δ| <= 2k·e·(Σ|w·x| + |b|) + 1e-30.
// A transposed GEMM, a wrong stride, a missing bias or a wrong RoPE pair misses these by orders
// of magnitude (values are O(1)).
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/kv_dtype.h"
#include "gtest/gtest.h"
#include "model/cuda/cuda_backend.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/model/cuda/backend_test_util.h"

namespace tandem {
namespace {

using testing::Get;
using testing::Put;
using testing::RandomFloats;

constexpr double kU = 1.0 / 256;        // bf16 unit roundoff
constexpr double kE = 1.0 / (1 << 24);  // fp32 unit roundoff

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}
std::vector<double> ToDouble(const std::vector<uint16_t>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i]);
  return out;
}

// Bytes for n bf16 values in a buffer the engine would size in floats.
std::unique_ptr<DeviceBuffer> Put16(ComputeBackend& b, const std::vector<uint16_t>& v) {
  std::vector<uint16_t> padded(v);
  padded.resize(v.size() * 2);  // the engine's float-sized buffers: bf16 uses the first half
  return Put(b, padded);
}
std::vector<double> Get16(ComputeBackend& b, const DeviceBuffer& buf, size_t n) {
  return ToDouble(Get<uint16_t>(b, buf, n));
}

class CudaBf16OpsTest : public testing::CudaTest {
 protected:
  void SetUp() override {
    testing::CudaTest::SetUp();
    if (IsSkipped()) return;
    gpu::CudaBackendOptions o;
    o.activations = gpu::CudaActivations::kBF16;
    absl::StatusOr<std::unique_ptr<ComputeBackend>> b = CreateCudaBackend(0, o);
    ASSERT_TRUE(b.ok()) << b.status();
    gpu_ = std::move(b).value();
    ASSERT_EQ(gpu_->activation_dtype(), ActivationDType::kBF16);
  }
  std::unique_ptr<ComputeBackend> gpu_;
};

TEST_F(CudaBf16OpsTest, EmbeddingAndGatherAreExact) {
  const int64_t vocab = 37, hidden = 72, m = 5;
  const std::vector<float> table = RandomFloats(vocab * hidden, 1);
  const std::vector<int32_t> ids = {0, 36, 5, 5, 17};
  std::unique_ptr<DeviceBuffer> t = Put(*gpu_, table);
  std::unique_ptr<DeviceBuffer> out = Put16(*gpu_, std::vector<uint16_t>(m * hidden));
  ASSERT_TRUE(gpu_->Embedding(t->f32(), ids.data(), m, hidden, out->f32()).ok());
  const std::vector<uint16_t> got = Get<uint16_t>(*gpu_, *out, m * hidden);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < hidden; ++j) {
      ASSERT_EQ(got[i * hidden + j], FloatToBf16(table[ids[i] * hidden + j])) << i << "," << j;
    }
  }
  const std::vector<int64_t> index = {4, -1, 0};
  std::unique_ptr<DeviceBuffer> g = Put16(*gpu_, std::vector<uint16_t>(3 * hidden, 0xffff));
  ASSERT_TRUE(gpu_->GatherRows(out->f32(), index.data(), 3, hidden, g->f32()).ok());
  const std::vector<uint16_t> gathered = Get<uint16_t>(*gpu_, *g, 3 * hidden);
  for (int64_t j = 0; j < hidden; ++j) {
    EXPECT_EQ(gathered[j], got[4 * hidden + j]);
    EXPECT_EQ(gathered[hidden + j], 0);
    EXPECT_EQ(gathered[2 * hidden + j], got[j]);
  }
}

TEST_F(CudaBf16OpsTest, AddAndSiluMul) {
  const int64_t n = 10007;
  const std::vector<uint16_t> a = ToBf16(RandomFloats(n, 2, 3.f));
  const std::vector<uint16_t> b = ToBf16(RandomFloats(n, 3, 3.f));
  std::unique_ptr<DeviceBuffer> da = Put16(*gpu_, a);
  std::unique_ptr<DeviceBuffer> db = Put16(*gpu_, b);
  std::unique_ptr<DeviceBuffer> out = Put16(*gpu_, std::vector<uint16_t>(n));
  ASSERT_TRUE(gpu_->SiluMul(da->f32(), db->f32(), n, out->f32()).ok());
  const std::vector<double> silu = Get16(*gpu_, *out, n);
  ASSERT_TRUE(gpu_->Add(da->f32(), db->f32(), n).ok());
  const std::vector<double> sum = Get16(*gpu_, *da, n);
  const std::vector<double> x = ToDouble(a), y = ToDouble(b);
  for (int64_t i = 0; i < n; ++i) {
    const double s = x[i] + y[i];
    ASSERT_LE(std::abs(sum[i] - s), (kU + 2 * kE) * std::abs(s)) << i;
    const double ref = x[i] / (1 + std::exp(-x[i])) * y[i];
    ASSERT_LE(std::abs(silu[i] - ref), (kU + 8 * kE) * std::abs(ref) + 1e-30) << i;
  }
}

TEST_F(CudaBf16OpsTest, RmsNormInPlace) {
  for (const int64_t n : {int64_t{64}, int64_t{576}, int64_t{2049}}) {
    const int64_t m = 3;
    const std::vector<uint16_t> x = ToBf16(RandomFloats(m * n, 4, 2.f));
    const std::vector<float> w = RandomFloats(n, 5);
    std::unique_ptr<DeviceBuffer> dx = Put16(*gpu_, x);
    std::unique_ptr<DeviceBuffer> dw = Put(*gpu_, w);
    ASSERT_TRUE(gpu_->RmsNorm(dx->f32(), dw->f32(), m, n, 1e-5f, dx->f32()).ok());
    const std::vector<double> got = Get16(*gpu_, *dx, m * n);
    const std::vector<double> xd = ToDouble(x);
    for (int64_t i = 0; i < m; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += xd[i * n + j] * xd[i * n + j];
      const double scale = 1 / std::sqrt(ss / n + 1e-5);
      for (int64_t j = 0; j < n; ++j) {
        const double ref = xd[i * n + j] * scale * w[j];
        ASSERT_LE(std::abs(got[i * n + j] - ref), (kU + (n / 2.0 + 6) * kE) * std::abs(ref))
            << "n " << n << " row " << i << " col " << j;
      }
    }
  }
}

TEST_F(CudaBf16OpsTest, RopeBothStylesWithFactors) {
  const int64_t m = 4;
  const int32_t heads = 3, d = 64;
  const std::vector<int64_t> pos = {0, 1, 777, 32000};
  std::vector<float> factors(d / 2);
  for (int i = 0; i < d / 2; ++i) factors[i] = 1.f + 0.25f * i;
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
    for (const float* f : std::vector<const float*>{nullptr, factors.data()}) {
      const RopeParams p{500000.f, style, f, f != nullptr ? 1.1386f : 1.f};
      const std::vector<uint16_t> x = ToBf16(RandomFloats(m * heads * d, 6));
      std::unique_ptr<DeviceBuffer> dx = Put16(*gpu_, x);
      ASSERT_TRUE(gpu_->Rope(dx->f32(), m, heads, d, pos.data(), p).ok());
      const std::vector<double> got = Get16(*gpu_, *dx, x.size());
      const std::vector<double> xd = ToDouble(x);
      for (int64_t r = 0; r < m; ++r) {
        for (int32_t h = 0; h < heads; ++h) {
          for (int32_t i = 0; i < d / 2; ++i) {
            double inv = std::pow(500000.0, -2.0 * i / d);
            if (f != nullptr) inv /= f[i];
            const double ang = pos[r] * inv;
            const double c = p.mscale * std::cos(ang), s = p.mscale * std::sin(ang);
            const int64_t base = (r * heads + h) * d;
            const int32_t ia = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
            const int32_t ib = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + d / 2;
            const double a = xd[base + ia], b = xd[base + ib];
            const double ra = a * c - b * s, rb = a * s + b * c;
            const double slack = 5 * kE * (std::abs(a) + std::abs(b)) * p.mscale;
            ASSERT_LE(std::abs(got[base + ia] - ra), kU * std::abs(ra) + slack) << r << h << i;
            ASSERT_LE(std::abs(got[base + ib] - rb), kU * std::abs(rb) + slack) << r << h << i;
          }
        }
      }
    }
  }
}

struct Shape {
  int64_t m, n, k;
  bool bias;
};

TEST_F(CudaBf16OpsTest, LinearFormsOnBothGemmPaths) {
  for (const Shape& s : {Shape{1, 96, 64, true}, Shape{3, 96, 64, false}, Shape{17, 256, 576, true},
                         Shape{5, 100, 36, true}, Shape{2, 100, 36, false}}) {
    const std::vector<float> w = RandomFloats(s.n * s.k, 7, 0.2f);
    const std::vector<float> bias = RandomFloats(s.n, 8);
    absl::StatusOr<std::unique_ptr<LinearOp>> op =
        gpu_->PrepareLinear(w.data(), s.n, s.k, s.bias ? bias.data() : nullptr);
    ASSERT_TRUE(op.ok()) << op.status();
    const std::vector<uint16_t> x = ToBf16(RandomFloats(s.m * s.k, 9));
    const std::vector<uint16_t> y0 = ToBf16(RandomFloats(s.m * s.n, 10));
    const std::vector<double> xd = ToDouble(x), yd = ToDouble(y0);
    std::unique_ptr<DeviceBuffer> dx = Put16(*gpu_, x);
    std::unique_ptr<DeviceBuffer> dy = Put16(*gpu_, std::vector<uint16_t>(s.m * s.n));
    std::unique_ptr<DeviceBuffer> dacc = Put16(*gpu_, y0);
    std::unique_ptr<DeviceBuffer> df32 = Put(*gpu_, std::vector<float>(s.m * s.n));
    ASSERT_TRUE(gpu_->Linear(**op, dx->f32(), s.m, dy->f32()).ok());
    ASSERT_TRUE(gpu_->LinearAdd(**op, dx->f32(), s.m, dacc->f32(), nullptr).ok());
    ASSERT_TRUE(gpu_->LinearF32Out(**op, dx->f32(), s.m, df32->f32()).ok());
    const std::vector<double> y = Get16(*gpu_, *dy, s.m * s.n);
    const std::vector<double> acc = Get16(*gpu_, *dacc, s.m * s.n);
    const std::vector<float> f32 = Get<float>(*gpu_, *df32, s.m * s.n);
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t t = 0; t < s.k; ++t) {
          const double p =
              static_cast<double>(Bf16ToFloat(FloatToBf16(w[j * s.k + t]))) * xd[i * s.k + t];
          ref += p;
          mag += std::abs(p);
        }
        const double b = s.bias ? bias[j] : 0.0;
        const double acc_tol = 2 * s.k * kE * (mag + std::abs(b));
        const int64_t e = i * s.n + j;
        const std::string where =
            absl::StrCat("m", s.m, " n", s.n, " k", s.k, " [", i, "][", j, "]");
        ASSERT_LE(std::abs(y[e] - (ref + b)),
                  (1 + kU) * (kU * std::abs(ref + b) + kU * std::abs(b) + acc_tol))
            << "Linear " << where;
        ASSERT_LE(std::abs(acc[e] - (yd[e] + ref + b)),
                  (1 + kU) * (kU * std::abs(yd[e] + ref + b) + kU * std::abs(b) + acc_tol))
            << "LinearAdd " << where;
        ASSERT_LE(std::abs(f32[e] - (ref + b)), acc_tol + 1e-30) << "LinearF32Out " << where;
      }
    }
  }
}

TEST_F(CudaBf16OpsTest, DcpCorrectionIsRefused) {
  std::unique_ptr<DeviceBuffer> buf = Put(*gpu_, std::vector<float>(64));
  const absl::Status s = gpu_->CorrectPartial(2, 0, buf->f32(), 4, 8, buf->f32());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace tandem
