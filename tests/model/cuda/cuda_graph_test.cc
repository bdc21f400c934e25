// The CUDA backend with TANDEM_CUDA_GRAPHS=on against the same backend without graphs, for f32
// and bf16 activations: a step-shaped op sequence (embedding, norm, projections, RoPE, SwiGLU,
// residual GEMMs, an eager boundary, gather, logits GEMM, download) runs for several steps with
// new token ids, positions and gather indices each step, so the steps after the first two replay
// captured graphs (graph_runner.h: eager warm-up, capture, then replay). Every step must equal the
// eager backend's — a replay that reused the captured step's metadata, or skipped a kernel,
// differs by O(1). Batch sizes on the bucket ladder (captured) and off it (eager) alternate.
//
// Tolerance: both backends run the same kernels in the same order; only the GEMM algorithm
// cuBLAS picks may differ (the graph backend gives cuBLAS a fixed workspace), i.e. the fp32
// accumulation order: per output |Δ| <= 2k·2^-24·Σ|w·x| for a GEMM of depth k, which after the
// few O(1) ops here is bounded by 1e-4 relative; bf16 outputs may then round differently by one
// bf16 ulp (2^-7 relative). Steps that replayed wrong metadata miss by orders of magnitude.
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/cuda/cuda_backend.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/model/cuda/backend_test_util.h"

namespace tandem {
namespace {

using testing::Get;
using testing::Put;
using testing::RandomFloats;

constexpr int64_t kHidden = 64, kInter = 128, kVocab = 50, kHeads = 4, kHeadDim = 16;

struct Model {
  std::unique_ptr<DeviceBuffer> table, norm;
  std::unique_ptr<LinearOp> wq, gate, up, down, head;
};

Model Prepare(ComputeBackend& b) {
  Model m;
  m.table = Put(b, RandomFloats(kVocab * kHidden, 1));
  m.norm = Put(b, RandomFloats(kHidden, 2));
  const auto lin = [&](int64_t n, int64_t k, uint64_t seed, bool bias) {
    const std::vector<float> w = RandomFloats(n * k, seed, 0.1f);
    const std::vector<float> bv = RandomFloats(n, seed + 100);
    absl::StatusOr<std::unique_ptr<LinearOp>> op =
        b.PrepareLinear(w.data(), n, k, bias ? bv.data() : nullptr);
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? std::move(op).value() : nullptr;
  };
  m.wq = lin(kHeads * kHeadDim, kHidden, 3, true);
  m.gate = lin(kInter, kHidden, 4, false);
  m.up = lin(kInter, kHidden, 5, false);
  m.down = lin(kHidden, kInter, 6, false);
  m.head = lin(kVocab, kHidden, 7, false);
  return m;
}

// Activation buffers of a fixed size and address across steps, as the engine's are.
using Buffers = std::map<int, std::unique_ptr<DeviceBuffer>>;

// One step over `rows` rows; returns the f32 logits [rows][vocab].
std::vector<float> Step(ComputeBackend& b, const Model& m, Buffers& keep, int64_t rows, int step) {
  std::vector<int32_t> ids(rows);
  std::vector<int64_t> pos(rows), index(rows);
  for (int64_t i = 0; i < rows; ++i) {
    ids[i] = static_cast<int32_t>((7 * i + 13 * step + 1) % kVocab);
    pos[i] = 5 * step + i;
    index[i] = (i + step) % rows;
  }
  const auto slot = [&](int id, int64_t floats) -> float* {
    std::unique_ptr<DeviceBuffer>& d = keep[id];
    if (d == nullptr) {
      absl::StatusOr<std::unique_ptr<DeviceBuffer>> a = b.Allocate(64 * floats * 4);
      EXPECT_TRUE(a.ok()) << a.status();
      if (!a.ok()) return nullptr;
      d = std::move(a).value();
    }
    return d->f32();
  };
  float* x = slot(0, kHidden);
  float* h = slot(1, kHidden);
  float* q = slot(2, kHeads * kHeadDim);
  float* g = slot(3, kInter);
  float* u = slot(4, kInter);
  float* hs = slot(5, kHidden);
  float* lg = slot(6, kVocab);
  const RopeParams rope{10000.f, RopeStyle::kRotateHalf};
  EXPECT_TRUE(b.Embedding(m.table->f32(), ids.data(), rows, kHidden, x).ok());
  EXPECT_TRUE(b.RmsNorm(x, m.norm->f32(), rows, kHidden, 1e-5f, h).ok());
  EXPECT_TRUE(b.Linear(*m.wq, h, rows, q).ok());
  EXPECT_TRUE(b.Rope(q, rows, kHeads, kHeadDim, pos.data(), rope).ok());
  EXPECT_TRUE(b.LinearGatedUp(*m.gate, *m.up, h, rows, u, g).ok());
  EXPECT_TRUE(b.LinearAdd(*m.down, g, rows, x, u).ok());
  // An eager boundary inside the step (attention would be one): ends the first piece.
  EXPECT_TRUE(b.Copy(h, q, rows * kHidden * 2).ok());
  EXPECT_TRUE(b.GatherRows(x, index.data(), rows, kHidden, hs).ok());
  EXPECT_TRUE(b.RmsNorm(hs, m.norm->f32(), rows, kHidden, 1e-5f, hs).ok());
  EXPECT_TRUE(b.LinearF32Out(*m.head, hs, rows, lg).ok());
  std::vector<float> out(rows * kVocab);
  EXPECT_TRUE(b.Download(out.data(), lg, out.size() * 4).ok());
  return out;
}

class CudaGraphTest : public testing::CudaTest,
                      public ::testing::WithParamInterface<gpu::CudaActivations> {};

TEST_P(CudaGraphTest, ReplaysEqualEagerStepsWithNewMetadata) {
  gpu::CudaBackendOptions eager_opts;
  eager_opts.activations = GetParam();
  gpu::CudaBackendOptions graph_opts = eager_opts;
  graph_opts.graphs = true;
  graph_opts.max_graph_batch = 8;
  absl::StatusOr<std::unique_ptr<ComputeBackend>> eager = CreateCudaBackend(0, eager_opts);
  absl::StatusOr<std::unique_ptr<ComputeBackend>> graphs = CreateCudaBackend(0, graph_opts);
  ASSERT_TRUE(eager.ok()) << eager.status();
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  EXPECT_EQ((*graphs)->SingleRankReason(), "") << "graphs run instances of several ranks";
  const Model me = Prepare(**eager), mg = Prepare(**graphs);
  Buffers be, bg;
  const double rel = GetParam() == gpu::CudaActivations::kBF16 ? 1.0 / 64 : 1e-4;
  // 4 and 8 are buckets (captured from the third step on); 3 is not (always eager).
  for (int step = 0; step < 12; ++step) {
    const int64_t rows = step % 3 == 2 ? 3 : (step % 2 == 0 ? 4 : 8);
    const std::vector<float> want = Step(**eager, me, be, rows, step);
    const std::vector<float> got = Step(**graphs, mg, bg, rows, step);
    ASSERT_EQ(got.size(), want.size());
    double scale = 0;
    for (float v : want) scale = std::max(scale, std::abs(static_cast<double>(v)));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], rel * std::max(1.0, scale))
          << "step " << step << " rows " << rows << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, CudaGraphTest,
                         ::testing::Values(gpu::CudaActivations::kF32, gpu::CudaActivations::kBF16),
                         [](const auto& info) {
                           return std::string(gpu::CudaActivationsName(info.param));
                         });

}  // namespace
}  // namespace tandem
