// The CUDA backend's newer paths on instances of several ranks, emulated on the CPU
// (docs/gpu.md#multi-rank-instances): the engine's collectives must (1) run after every op a
// backend recorded instead of launching (CUDA graph pieces, ComputeBackend::Flush) and (2) move
// bf16 when the activations are bf16 (engine/collective_dtype.h), with the in-process CPU
// communicator summing bf16 as NCCL does.
//
// * DeferringBackend holds back the ops the CUDA backend records into graph pieces and runs them
//   only at its next eager op or Flush. A collective the engine issued without flushing first
//   reads buffers those ops have not written yet (O(1) errors), so equality with the plain CPU
//   backend — bit for bit: the same ops run in the same order on the same data — shows every
//   collective is preceded by a flush.
// * Bf16ActivationsBackend keeps every activation buffer in bf16 (the first half of the floats
//   the engine sizes, as the CUDA backend does) and runs the CPU backend's op on widened copies,
//   rounding each output to bf16. A collective moving the wrong element type misplaces every
//   rank's part of a gather (or sums bf16 pairs as floats): O(1) errors. Between layouts the
//   rounding points differ (each TP rank rounds its partial product, DCP rounds partial outputs
//   before summing them), so multi-rank bf16 runs are compared with the f32 run under a bound:
//   kBf16Tolerance, max |Δ| relative to the largest |logit|. bf16's unit roundoff is 2^-8; each
//   of the ~20 rounded ops per layer adds up to that relative error to its output; over two
//   layers of this small model the observed error is 0.006 on one rank and 0.006-0.010 on the
//   multi-rank layouts (recorded as test properties) — 0.06 leaves margin and stays far below
//   the O(1) errors of a misplaced gather.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "attention/kv_dtype.h"
#include "common/status_macros.h"
#include "engine/instance.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_backend.h"
#include "tests/engine/forwarding_backend.h"
#include "tests/engine/step_script.h"
#include "tests/engine/test_model.h"

namespace tandem {
namespace {

constexpr double kBf16Tolerance = 0.06;

// bf16 values in the first half of a float buffer (ComputeBackend's kBF16 activations).
std::vector<float> Widen(const float* p, int64_t n) {
  const auto* b = reinterpret_cast<const uint16_t*>(p);
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(b[i]);
  return out;
}
void Narrow(const std::vector<float>& v, float* p) {
  auto* b = reinterpret_cast<uint16_t*>(p);
  for (size_t i = 0; i < v.size(); ++i) b[i] = FloatToBf16(v[i]);
}

class Bf16ActivationsBackend final : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  using Base = testing::ForwardingBackend;

  ActivationDType activation_dtype() const override { return ActivationDType::kBF16; }

  absl::Status Linear(const LinearOp& op, const float* x, int64_t m, float* y) override {
    std::vector<float> xf = Widen(x, m * op.k()), yf(m * op.n());
    TANDEM_RETURN_IF_ERROR(Base::Linear(op, xf.data(), m, yf.data()));
    Narrow(yf, y);
    return absl::OkStatus();
  }
  absl::Status LinearF32Out(const LinearOp& op, const float* x, int64_t m, float* y) override {
    const std::vector<float> xf = Widen(x, m * op.k());
    return Base::Linear(op, xf.data(), m, y);
  }
  absl::Status LinearAdd(const LinearOp& op, const float* x, int64_t m, float* y,
                         float* /*scratch*/) override {
    std::vector<float> xf = Widen(x, m * op.k()), yf = Widen(y, m * op.n()), s(m * op.n());
    TANDEM_RETURN_IF_ERROR(Base::LinearAdd(op, xf.data(), m, yf.data(), s.data()));
    Narrow(yf, y);
    return absl::OkStatus();
  }
  absl::Status LinearSiluMul(const LinearOp& gate, const float* x, int64_t m, const float* up,
                             float* out) override {
    std::vector<float> xf = Widen(x, m * gate.k()), upf = Widen(up, m * gate.n()),
                       outf(m * gate.n());
    TANDEM_RETURN_IF_ERROR(Base::LinearSiluMul(gate, xf.data(), m, upf.data(), outf.data()));
    Narrow(outf, out);
    return absl::OkStatus();
  }
  absl::Status LinearMany(absl::Span<const LinearOp* const> ops, const float* x, int64_t m,
                          absl::Span<float* const> ys) override {
    return ComputeBackend::LinearMany(ops, x, m, ys);  // Linear per matrix, each rounded
  }
  absl::Status LinearGatedUp(const LinearOp& gate, const LinearOp& up_op, const float* x, int64_t m,
                             float* up, float* out) override {
    return ComputeBackend::LinearGatedUp(gate, up_op, x, m, up, out);
  }
  absl::Status LinearRows(const LinearOp& op, const int32_t* ids, int64_t m, float* out) override {
    std::vector<float> outf(m * op.k());
    TANDEM_RETURN_IF_ERROR(Base::LinearRows(op, ids, m, outf.data()));
    Narrow(outf, out);
    return absl::OkStatus();
  }
  absl::Status Embedding(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                         float* out) override {
    std::vector<float> outf(m * hidden);
    TANDEM_RETURN_IF_ERROR(Base::Embedding(table, ids, m, hidden, outf.data()));
    Narrow(outf, out);
    return absl::OkStatus();
  }
  absl::Status RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps,
                       float* y) override {
    std::vector<float> xf = Widen(x, m * n), yf(m * n);
    TANDEM_RETURN_IF_ERROR(Base::RmsNorm(xf.data(), w, m, n, eps, yf.data()));
    Narrow(yf, y);
    return absl::OkStatus();
  }
  absl::Status Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
                    const RopeParams& params) override {
    std::vector<float> xf = Widen(x, m * heads * head_dim);
    TANDEM_RETURN_IF_ERROR(Base::Rope(xf.data(), m, heads, head_dim, positions, params));
    Narrow(xf, x);
    return absl::OkStatus();
  }
  absl::Status SiluMul(const float* g, const float* u, int64_t n, float* out) override {
    std::vector<float> gf = Widen(g, n), uf = Widen(u, n), outf(n);
    TANDEM_RETURN_IF_ERROR(Base::SiluMul(gf.data(), uf.data(), n, outf.data()));
    Narrow(outf, out);
    return absl::OkStatus();
  }
  absl::Status Add(float* x, const float* y, int64_t n) override {
    std::vector<float> xf = Widen(x, n), yf = Widen(y, n);
    TANDEM_RETURN_IF_ERROR(Base::Add(xf.data(), yf.data(), n));
    Narrow(xf, x);
    return absl::OkStatus();
  }
  absl::Status AddRmsNorm(float* residual, const float* x, const float* w, int64_t m, int64_t n,
                          float eps, float* out) override {
    return ComputeBackend::AddRmsNorm(residual, x, w, m, n, eps, out);  // Add, then RmsNorm
  }
  absl::Status GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols,
                          float* dst) override {
    int64_t rows = 0;
    for (int64_t i = 0; i < m; ++i) rows = std::max(rows, index[i] + 1);
    std::vector<float> srcf = Widen(src, rows * cols), dstf(m * cols);
    TANDEM_RETURN_IF_ERROR(Base::GatherRows(srcf.data(), index, m, cols, dstf.data()));
    Narrow(dstf, dst);
    return absl::OkStatus();
  }
  absl::Status WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t m,
                       const float* k, const float* v) override {
    const int64_t n = m * pool.geometry.num_kv_heads * pool.geometry.head_dim;
    const std::vector<float> kf = Widen(k, n), vf = Widen(v, n);
    return Base::WriteKv(pool, layer, slots, m, kf.data(), vf.data());
  }
  absl::Status Attention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                         const float* q, int32_t num_q_heads, float scale, float* out,
                         float* lse) override {
    const int64_t n = rows.num_rows * num_q_heads * pool.geometry.head_dim;
    std::vector<float> qf = Widen(q, n), outf(n);
    TANDEM_RETURN_IF_ERROR(
        Base::Attention(pool, layer, rows, qf.data(), num_q_heads, scale, outf.data(), lse));
    Narrow(outf, out);
    return absl::OkStatus();
  }
  absl::Status CorrectPartial(int32_t n, int32_t me, const float* all_lse, int64_t items,
                              int32_t head_dim, float* out) override {
    std::vector<float> outf = Widen(out, items * head_dim);
    TANDEM_RETURN_IF_ERROR(Base::CorrectPartial(n, me, all_lse, items, head_dim, outf.data()));
    Narrow(outf, out);
    return absl::OkStatus();
  }
};

// Holds back the ops the CUDA backend records into graph pieces (cuda_backend.cc's Exec) and
// runs them, in order, at the next eager op (memory ops, Synchronize, the element-wise ops it
// runs eagerly, KV write, attention, correction) or Flush — as a pending piece is launched.
// Host metadata (ids, positions, gather indices) is copied when recorded, as the CUDA backend
// stages it.
class DeferringBackend final : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  using Base = testing::ForwardingBackend;

  int64_t deferred() const { return deferred_; }

  absl::Status Flush() override { return RunPending(); }
  absl::Status Synchronize() override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::Synchronize();
  }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int64_t bytes) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::Allocate(bytes);
  }
  absl::Status Upload(void* d, const void* s, int64_t b) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::Upload(d, s, b);
  }
  absl::Status Download(void* d, const void* s, int64_t b) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::Download(d, s, b);
  }
  absl::Status Copy(void* d, const void* s, int64_t b) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::Copy(d, s, b);
  }
  absl::Status SiluMul(const float* g, const float* u, int64_t n, float* out) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::SiluMul(g, u, n, out);
  }
  absl::Status Add(float* x, const float* y, int64_t n) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::Add(x, y, n);
  }
  absl::Status WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t m,
                       const float* k, const float* v) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::WriteKv(pool, layer, slots, m, k, v);
  }
  absl::Status Attention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                         const float* q, int32_t num_q_heads, float scale, float* out,
                         float* lse) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::Attention(pool, layer, rows, q, num_q_heads, scale, out, lse);
  }
  absl::Status CorrectPartial(int32_t n, int32_t me, const float* all_lse, int64_t items,
                              int32_t head_dim, float* out) override {
    TANDEM_RETURN_IF_ERROR(RunPending());
    return Base::CorrectPartial(n, me, all_lse, items, head_dim, out);
  }

  // Recorded.
  absl::Status Linear(const LinearOp& op, const float* x, int64_t m, float* y) override {
    return Defer([=, this, &op] { return Base::Linear(op, x, m, y); });
  }
  absl::Status LinearF32Out(const LinearOp& op, const float* x, int64_t m, float* y) override {
    return Defer([=, this, &op] { return Base::LinearF32Out(op, x, m, y); });
  }
  absl::Status LinearAdd(const LinearOp& op, const float* x, int64_t m, float* y,
                         float* scratch) override {
    return Defer([=, this, &op] { return Base::LinearAdd(op, x, m, y, scratch); });
  }
  absl::Status LinearSiluMul(const LinearOp& gate, const float* x, int64_t m, const float* up,
                             float* out) override {
    return Defer([=, this, &gate] { return Base::LinearSiluMul(gate, x, m, up, out); });
  }
  absl::Status LinearMany(absl::Span<const LinearOp* const> ops, const float* x, int64_t m,
                          absl::Span<float* const> ys) override {
    std::vector<const LinearOp*> o(ops.begin(), ops.end());
    std::vector<float*> y(ys.begin(), ys.end());
    return Defer([=, this] { return Base::LinearMany(o, x, m, y); });
  }
  absl::Status LinearGatedUp(const LinearOp& gate, const LinearOp& up_op, const float* x, int64_t m,
                             float* up, float* out) override {
    return Defer(
        [=, this, &gate, &up_op] { return Base::LinearGatedUp(gate, up_op, x, m, up, out); });
  }
  absl::Status LinearRows(const LinearOp& op, const int32_t* ids, int64_t m, float* out) override {
    std::vector<int32_t> id(ids, ids + m);
    return Defer([=, this, &op] { return Base::LinearRows(op, id.data(), m, out); });
  }
  absl::Status Embedding(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                         float* out) override {
    std::vector<int32_t> id(ids, ids + m);
    return Defer([=, this] { return Base::Embedding(table, id.data(), m, hidden, out); });
  }
  absl::Status RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps,
                       float* y) override {
    return Defer([=, this] { return Base::RmsNorm(x, w, m, n, eps, y); });
  }
  absl::Status AddRmsNorm(float* residual, const float* x, const float* w, int64_t m, int64_t n,
                          float eps, float* out) override {
    return Defer([=, this] { return Base::AddRmsNorm(residual, x, w, m, n, eps, out); });
  }
  absl::Status Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
                    const RopeParams& params) override {
    std::vector<int64_t> pos(positions, positions + m);
    return Defer([=, this] { return Base::Rope(x, m, heads, head_dim, pos.data(), params); });
  }
  absl::Status GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols,
                          float* dst) override {
    std::vector<int64_t> idx(index, index + m);
    return Defer([=, this] { return Base::GatherRows(src, idx.data(), m, cols, dst); });
  }

 private:
  absl::Status Defer(std::function<absl::Status()> op) {
    pending_.push_back(std::move(op));
    ++deferred_;
    return absl::OkStatus();
  }
  absl::Status RunPending() {
    std::vector<std::function<absl::Status()>> ops;
    ops.swap(pending_);
    for (auto& op : ops) TANDEM_RETURN_IF_ERROR(op());
    return absl::OkStatus();
  }

  std::vector<std::function<absl::Status()>> pending_;
  int64_t deferred_ = 0;
};

enum class Wrap { kNone, kBf16, kDefer, kBf16Defer };

// Logits of every step of a fixed schedule (a prefill of two prompts, then three decode steps,
// the last of one request), on `parallel` with every rank's CPU backend wrapped as `wrap`.
std::vector<std::vector<float>> RunSchedule(const LlamaWeights& w, const ParallelConfig& parallel,
                                            Wrap wrap, int64_t* deferred = nullptr) {
  InstanceOptions o;
  o.parallel = parallel;
  o.kv_bytes_per_rank = int64_t{8} << 20;
  o.threads_per_rank = 1;
  // make_backend runs on every rank's thread at once (engine/instance.h): the list is shared.
  absl::Mutex deferring_mu;
  std::vector<DeferringBackend*> deferring;
  o.make_backend = [&](int32_t) -> absl::StatusOr<std::unique_ptr<ComputeBackend>> {
    std::unique_ptr<ComputeBackend> b = CreateCpuBackend();
    if (wrap == Wrap::kBf16 || wrap == Wrap::kBf16Defer) {
      b = std::make_unique<Bf16ActivationsBackend>(std::move(b));
    }
    if (wrap == Wrap::kDefer || wrap == Wrap::kBf16Defer) {
      auto d = std::make_unique<DeferringBackend>(std::move(b));
      absl::MutexLock lock(&deferring_mu);
      deferring.push_back(d.get());
      b = std::move(d);
    }
    return b;
  };
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(w, o);
  EXPECT_TRUE(inst.ok()) << parallel.ToString() << ": " << inst.status();
  if (!inst.ok()) return {};

  const int32_t vocab = w.config.vocab_size;
  std::mt19937_64 rng(17);
  const auto token = [&] { return static_cast<int32_t>(rng() % vocab); };
  const std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  std::vector<StepInput> steps = testing::PrefillThenDecodeSteps(
      tables, {7, 5}, 3, token, [](int s, size_t r) { return s == 2 && r == 0; });
  std::vector<std::vector<float>> out;
  for (const StepInput& step : steps) {
    absl::StatusOr<std::vector<float>> l = (*inst)->Run(step);
    EXPECT_TRUE(l.ok()) << parallel.ToString() << ": " << l.status();
    if (!l.ok()) return {};
    out.push_back(*std::move(l));
  }
  if (deferred != nullptr) {
    *deferred = 0;
    for (const DeferringBackend* d : deferring) *deferred += d->deferred();
  }
  return out;
}

double MaxRelError(const std::vector<std::vector<float>>& got,
                   const std::vector<std::vector<float>>& want) {
  double max_ref = 1.0, max_diff = 0.0;
  for (size_t s = 0; s < want.size(); ++s) {
    for (size_t i = 0; i < want[s].size(); ++i) {
      max_ref = std::max(max_ref, std::abs(static_cast<double>(want[s][i])));
      const double diff = std::abs(static_cast<double>(got[s][i]) - want[s][i]);
      if (!std::isfinite(diff)) return std::numeric_limits<double>::infinity();
      max_diff = std::max(max_diff, diff);
    }
  }
  return max_diff / max_ref;
}

std::vector<ParallelConfig> MultiRankLayouts() {
  std::vector<ParallelConfig> out;
  for (const auto& [tp, pcp, dcp] :
       std::vector<std::array<int32_t, 3>>{{2, 1, 1}, {1, 2, 1}, {1, 2, 2}, {4, 1, 2}, {2, 2, 2}}) {
    ParallelConfig p;
    p.tp = tp;
    p.pcp = pcp;
    p.dcp = dcp;
    p.block_size = 4;
    out.push_back(p);
  }
  return out;
}

class MultiRankPathsTest : public ::testing::Test {
 protected:
  const LlamaConfig config_ = testing::SmallConfig();
  const LlamaWeights weights_ = testing::RandomWeights(config_, 23);
};

TEST_F(MultiRankPathsTest, RecordedOpsRunBeforeEveryCollective) {
  for (const ParallelConfig& p : MultiRankLayouts()) {
    const std::vector<std::vector<float>> plain = RunSchedule(weights_, p, Wrap::kNone);
    int64_t deferred = 0;
    const std::vector<std::vector<float>> recorded =
        RunSchedule(weights_, p, Wrap::kDefer, &deferred);
    ASSERT_EQ(recorded.size(), plain.size()) << p.ToString();
    EXPECT_GT(deferred, 0) << p.ToString();
    for (size_t s = 0; s < plain.size(); ++s) {
      EXPECT_EQ(recorded[s], plain[s]) << p.ToString() << " step " << s;
    }
  }
}

TEST_F(MultiRankPathsTest, Bf16ActivationsMoveBf16ThroughCollectives) {
  ParallelConfig one;
  one.block_size = 4;
  const std::vector<std::vector<float>> f32 = RunSchedule(weights_, one, Wrap::kNone);
  const std::vector<std::vector<float>> bf16_one = RunSchedule(weights_, one, Wrap::kBf16);
  ASSERT_EQ(bf16_one.size(), f32.size());
  const double one_rank_error = MaxRelError(bf16_one, f32);
  RecordProperty("bf16_error_one_rank", std::to_string(one_rank_error));
  EXPECT_LT(one_rank_error, kBf16Tolerance);
  EXPECT_GT(one_rank_error, 0.0) << "the emulation rounds activations to bf16";
  for (const ParallelConfig& p : MultiRankLayouts()) {
    const std::vector<std::vector<float>> bf16 = RunSchedule(weights_, p, Wrap::kBf16);
    ASSERT_EQ(bf16.size(), f32.size()) << p.ToString();
    const double error = MaxRelError(bf16, f32);
    RecordProperty("bf16_error_" + p.ToString(), std::to_string(error));
    EXPECT_LT(error, kBf16Tolerance) << p.ToString() << " (one rank: " << one_rank_error << ")";
    // bf16 activations with recorded ops (TANDEM_CUDA_ACTIVATIONS=bf16 + TANDEM_CUDA_GRAPHS=on).
    const std::vector<std::vector<float>> both = RunSchedule(weights_, p, Wrap::kBf16Defer);
    ASSERT_EQ(both.size(), bf16.size()) << p.ToString();
    for (size_t s = 0; s < bf16.size(); ++s) {
      EXPECT_EQ(both[s], bf16[s]) << p.ToString() << " step " << s;
    }
  }
}

}  // namespace
}  // namespace tandem
