#include "model/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/cpu/paged_attention.h"
#include "attention/lse_merge.h"
#include "common/parallel_for.h"
#include "model/cpu/cpu_ops.h"
#include "model/cpu/dnnl_linear.h"
#include "model/cpu/quant_linear.h"

namespace tandem {
namespace {

std::atomic<bool> g_fuse_epilogues{true};

// Every CPU LinearOp is a DnnlLinear (f32, packed) or a QuantLinear (blocks).
absl::Status Forward(const LinearOp& op, const float* x, int64_t m, float* y,
                     DnnlLinear::Epilogue epilogue, const float* aux = nullptr) {
  if (const auto* q = dynamic_cast<const QuantLinear*>(&op)) {
    return q->Forward(x, m, y, epilogue, aux);
  }
  return static_cast<const DnnlLinear&>(op).Forward(x, m, y, epilogue, aux);
}

class HostBuffer final : public DeviceBuffer {
 public:
  HostBuffer(void* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  ~HostBuffer() override { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* data_;
  int64_t bytes_;
};

class CpuBackend final : public ComputeBackend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::string device_key() const override { return "cpu"; }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int64_t bytes) override {
    if (bytes < 0) return absl::InvalidArgumentError("negative allocation");
    // Large buffers (KV pools, weights) are 2 MiB aligned and advised to use transparent huge
    // pages: KV blocks are read scattered, and 4 KiB pages cost a TLB miss per block (measured
    // by bench/attention: f32 decode attention 10.3 → 13.0 GB/s on one core).
    constexpr int64_t kHuge = int64_t{2} << 20;
    const int64_t align = bytes >= kHuge ? kHuge : 64;
    const int64_t rounded = (std::max<int64_t>(bytes, 1) + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (p != nullptr && align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
    }
    return std::make_unique<HostBuffer>(p, bytes);
  }
  absl::Status Upload(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Download(void* dst, const void* src, int64_t bytes) override {
    return Upload(dst, src, bytes);
  }
  absl::Status Copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  // Above the GEMV crossover every linear layer is a oneDNN GEMM: the step's other loops run on
  // the same OpenMP team (common/parallel_for.h, LoopTeam).
  void BeginForward(int64_t rows) override {
    SetLoopTeamForThisThread(rows > QuantLinear::SmallBatchLimit() ? LoopTeam::kOpenMp
                                                                   : LoopTeam::kWorkers);
  }

  absl::StatusOr<std::unique_ptr<LinearOp>> PrepareLinear(const float* w, int64_t n, int64_t k,
                                                          const float* bias) override {
    absl::StatusOr<std::unique_ptr<DnnlLinear>> op = DnnlLinear::Create(w, n, k, bias);
    if (!op.ok()) return op.status();
    return std::unique_ptr<LinearOp>(std::move(op).value());
  }

  absl::StatusOr<std::unique_ptr<LinearOp>> PrepareQuantizedLinear(GgmlType type, const uint8_t* w,
                                                                   int64_t n, int64_t k,
                                                                   const float* bias) override {
    absl::StatusOr<std::unique_ptr<QuantLinear>> op = QuantLinear::Create(type, w, n, k, bias);
    if (!op.ok()) return op.status();
    return std::unique_ptr<LinearOp>(std::move(op).value());
  }
  bool CanReadLinearRows(const LinearOp& op) const override {
    return dynamic_cast<const QuantLinear*>(&op) != nullptr;
  }
  absl::Status LinearRows(const LinearOp& op, const int32_t* ids, int64_t m, float* out) override {
    const auto* q = dynamic_cast<const QuantLinear*>(&op);
    if (q == nullptr) return absl::InvalidArgumentError("LinearRows: not a quantised weight");
    return q->DequantizeRows(ids, m, out);
  }

  absl::Status Linear(const LinearOp& op, const float* x, int64_t m, float* y) override {
    return Forward(op, x, m, y, DnnlLinear::Epilogue::kStore);
  }
  absl::Status LinearAdd(const LinearOp& op, const float* x, int64_t m, float* y,
                         float* scratch) override {
    if (!g_fuse_epilogues.load(std::memory_order_relaxed)) {
      if (absl::Status s = Forward(op, x, m, scratch, DnnlLinear::Epilogue::kStore); !s.ok()) {
        return s;
      }
      cpu::Add(y, scratch, m * op.n());
      return absl::OkStatus();
    }
    return Forward(op, x, m, y, DnnlLinear::Epilogue::kAccumulate);
  }
  absl::Status LinearSiluMul(const LinearOp& gate, const float* x, int64_t m, const float* up,
                             float* out) override {
    if (!g_fuse_epilogues.load(std::memory_order_relaxed)) {
      if (absl::Status s = Forward(gate, x, m, out, DnnlLinear::Epilogue::kStore); !s.ok()) {
        return s;
      }
      cpu::SiluMul(out, up, m * gate.n(), out);
      return absl::OkStatus();
    }
    return Forward(gate, x, m, out, DnnlLinear::Epilogue::kSiluMul, up);
  }
  // Decode-sized batches over quantised weights: one parallel pass for all matrices.
  absl::Status LinearMany(absl::Span<const LinearOp* const> ops, const float* x, int64_t m,
                          absl::Span<float* const> ys) override {
    std::vector<QuantLinear::Job> jobs;
    for (size_t j = 0; j < ops.size(); ++j) {
      const auto* q = dynamic_cast<const QuantLinear*>(ops[j]);
      if (q == nullptr || m > QuantLinear::SmallBatchLimit()) {
        return ComputeBackend::LinearMany(ops, x, m, ys);
      }
      jobs.push_back(QuantLinear::Job{q, ys[j]});
    }
    return QuantLinear::ForwardMany(jobs, x, m);
  }
  absl::Status LinearGatedUp(const LinearOp& gate, const LinearOp& up_op, const float* x, int64_t m,
                             float* up, float* out) override {
    const auto* g = dynamic_cast<const QuantLinear*>(&gate);
    const auto* u = dynamic_cast<const QuantLinear*>(&up_op);
    if (g == nullptr || u == nullptr || m > QuantLinear::SmallBatchLimit() ||
        !g_fuse_epilogues.load(std::memory_order_relaxed)) {
      return ComputeBackend::LinearGatedUp(gate, up_op, x, m, up, out);
    }
    return QuantLinear::ForwardGated(*g, *u, x, m, up, out);
  }
  absl::Status Embedding(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                         float* out) override {
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(out + i * hidden, table + static_cast<int64_t>(ids[i]) * hidden,
                  hidden * sizeof(float));
    }
    return absl::OkStatus();
  }
  absl::Status RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps,
                       float* y) override {
    cpu::RmsNorm(x, w, m, n, eps, y);
    return absl::OkStatus();
  }
  absl::Status Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
                    const RopeParams& params) override {
    int64_t max_pos = 0;
    for (int64_t i = 0; i < m; ++i) max_pos = std::max(max_pos, positions[i]);
    rope_.Ensure(max_pos, head_dim, params.theta, params.freq_factors, params.mscale);
    cpu::Rope(x, m, heads, head_dim, positions, params.style, rope_);
    return absl::OkStatus();
  }
  absl::Status SiluMul(const float* gate, const float* up, int64_t n, float* out) override {
    cpu::SiluMul(gate, up, n, out);
    return absl::OkStatus();
  }
  absl::Status Add(float* x, const float* y, int64_t n) override {
    cpu::Add(x, y, n);
    return absl::OkStatus();
  }
  absl::Status GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols,
                          float* dst) override {
    cpu::GatherRows(src, index, m, cols, dst);
    return absl::OkStatus();
  }
  // The kernels trust their arguments; the checks are O(rows + blocks), negligible next to the
  // attention itself, and turn an indexing bug upstream into an error instead of a wild write.
  absl::Status WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t m,
                       const float* k, const float* v) override {
    if (absl::Status s = ValidateKvCacheWrite(pool, layer, slots, m); !s.ok()) return s;
    WriteKvCache(pool, layer, slots, m, k, v);
    return absl::OkStatus();
  }
  absl::Status Attention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                         const float* q, int32_t num_q_heads, float scale, float* out,
                         float* lse) override {
    if (absl::Status s = ValidateAttentionCall(pool, layer, rows, num_q_heads); !s.ok()) return s;
    PagedAttention(pool, layer, rows, q, num_q_heads, scale, out, lse);
    return absl::OkStatus();
  }
  absl::Status CorrectPartial(int32_t n, int32_t me, const float* all_lse, int64_t items,
                              int32_t head_dim, float* out) override {
    CorrectPartialInPlace(n, me, all_lse, items, head_dim, out, nullptr);
    return absl::OkStatus();
  }

 private:
  cpu::RopeTable rope_;
};

}  // namespace

std::unique_ptr<ComputeBackend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

void SetCpuEpilogueFusion(bool fused) { g_fuse_epilogues.store(fused); }

}  // namespace tandem
