// The compute backend of one rank: device memory, prepared weights and the ops of a Llama-family
// forward pass (docs/design.md#model-and-compute). The forward (engine/rank_model.*) is written
// once against this interface; the CPU backend runs it on host memory with oneDNN GEMMs and
// Tandem's kernels, the CUDA backend on one GPU with cuBLAS and Tandem's CUDA kernels.
//
// Pointers passed to ops are device pointers of this backend ("device" = host memory for the CPU
// backend) unless a parameter says `host`. Index arrays (token ids, positions, slots, block
// tables) are always host arrays; a GPU backend uploads them itself.
//
// Thread-safety: a backend instance belongs to one rank thread. Prepared weights (LinearOp,
// DeviceBuffer) may be shared read-only by ranks on the same device (same device_key()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "attention/attention_args.h"
#include "model/format/llama_weights.h"

namespace tandem {

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() const = 0;
  virtual int64_t bytes() const = 0;
  float* f32() const { return static_cast<float*>(data()); }
};

// A weight matrix W [n][k] (+ optional bias [n]) prepared for y[m][n] = x[m][k]·Wᵀ + b.
class LinearOp {
 public:
  virtual ~LinearOp() = default;
  virtual int64_t n() const = 0;
  virtual int64_t k() const = 0;
  // Bytes of memory the prepared weight holds (f32 [n][k] unless the backend says otherwise).
  virtual int64_t resident_bytes() const { return n() * k() * static_cast<int64_t>(sizeof(float)); }
};

struct RopeParams {
  float theta = 10000.f;
  RopeStyle style = RopeStyle::kAdjacentPairs;
  // Host array of head_dim/2 frequency divisors (LlamaConfig::rope_freq_factors) or null for
  // none: pair i rotates by pos · theta^(−2i/head_dim) / freq_factors[i]. It stays valid and
  // unchanged for the backend's lifetime (it points into the model's config).
  const float* freq_factors = nullptr;
  // Multiplies cos and sin (LlamaConfig::rope_mscale; YaRN's magnitude correction).
  float mscale = 1.f;
};

// What the activation buffers the ops read and write between each other hold. kBF16: bf16 values
// (the first half of buffers the engine still sizes in floats); the engine reads logits through
// LinearF32Out.
enum class ActivationDType : uint8_t { kF32, kBF16 };

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;

  virtual std::string_view name() const = 0;
  // Ranks whose backends report the same key share memory and may share prepared weights.
  virtual std::string device_key() const = 0;

  // ---- memory ----
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int64_t bytes) = 0;
  virtual absl::Status Upload(void* dst, const void* host_src, int64_t bytes) = 0;
  virtual absl::Status Download(void* host_dst, const void* src, int64_t bytes) = 0;
  virtual absl::Status Copy(void* dst, const void* src, int64_t bytes) = 0;
  // Waits for queued work; reports asynchronous errors.
  virtual absl::Status Synchronize() = 0;
  // Launches, in order and without waiting, every op the backend recorded but has not launched
  // yet (CUDA graph pieces, docs/gpu.md#cuda-graphs). The engine calls it before each collective,
  // which reads what those ops write: NCCL enqueues behind them on the same stream; the CPU
  // communicator reads at once. Default: a backend that runs each op when called has none.
  virtual absl::Status Flush() { return absl::OkStatus(); }

  // Called on the rank's own thread before each forward pass with the rows (tokens) this rank
  // computes in it, so the backend can choose how to run the pass (the CPU backend picks the
  // threads its loops run on: oneDNN's OpenMP team when the linear layers are GEMMs).
  virtual void BeginForward(int64_t /*rows*/) {}

  // ---- weights ----
  // w: host [n][k] row-major; bias: host [n] or nullptr.
  virtual absl::StatusOr<std::unique_ptr<LinearOp>> PrepareLinear(const float* w, int64_t n,
                                                                  int64_t k, const float* bias) = 0;

  // w: host, n rows of k elements of GGML `type` in whole blocks, back to back (a quantised
  // matrix as its file stores it). A backend that computes from such weights directly keeps them
  // so; the default is UNIMPLEMENTED and the caller dequantises and calls PrepareLinear.
  virtual absl::StatusOr<std::unique_ptr<LinearOp>> PrepareQuantizedLinear(GgmlType type,
                                                                           const uint8_t* w,
                                                                           int64_t n, int64_t k,
                                                                           const float* bias) {
    (void)w, (void)n, (void)k, (void)bias;
    return absl::UnimplementedError(absl::StrCat(absl::string_view(name().data(), name().size()),
                                                 " backend keeps no ", GgmlTypeName(type),
                                                 " weights"));
  }
  // Whether LinearRows can read `op` (an embedding lookup in a prepared weight matrix).
  virtual bool CanReadLinearRows(const LinearOp& op) const {
    (void)op;
    return false;
  }
  // out[i] = row ids[i] of op's weight matrix as f32 ([m][op.k()]); ids: host [m].
  // REQUIRES: CanReadLinearRows(op).
  virtual absl::Status LinearRows(const LinearOp& op, const int32_t* ids, int64_t m, float* out) {
    (void)op, (void)ids, (void)m, (void)out;
    return absl::UnimplementedError(absl::StrCat(absl::string_view(name().data(), name().size()),
                                                 " backend cannot read weight rows"));
  }

  virtual ActivationDType activation_dtype() const { return ActivationDType::kF32; }
  // Non-empty when this backend's configuration runs only instances of one rank (tp = pcp =
  // dcp = 1): says why. The engine refuses larger layouts with it.
  virtual std::string SingleRankReason() const { return ""; }
  // The rows to run a step of `rows` rows with (>= rows) on an instance without PCP or DCP (one
  // rank, or TP ranks that all run every row): a backend that reuses captured work per batch
  // size (CUDA graphs) rounds up to its next bucket. The engine fills the extra rows with
  // padding that reads and writes nothing (token 0, position −1, KV slot −1, gather index −1)
  // and ignores their outputs. Every TP rank's backend must answer alike.
  virtual int64_t PaddedRows(int64_t rows) const { return rows; }

  // ---- ops ----
  virtual absl::Status Linear(const LinearOp& op, const float* x, int64_t m, float* y) = 0;
  // Linear whose output y is f32 whatever activation_dtype() (the logits the engine downloads).
  virtual absl::Status LinearF32Out(const LinearOp& op, const float* x, int64_t m, float* y) {
    return Linear(op, x, m, y);
  }
  // y += x·Wᵀ + b (a residual add). A backend that cannot fuse the add into its GEMM computes
  // into `scratch` ([m][op.n()] floats, distinct from x and y) and adds.
  virtual absl::Status LinearAdd(const LinearOp& op, const float* x, int64_t m, float* y,
                                 float* scratch) = 0;
  // out = silu(x·W_gateᵀ + b) ⊙ up, [m][gate.n()]: SwiGLU's gate projection with its activation.
  // out must not alias x or up.
  virtual absl::Status LinearSiluMul(const LinearOp& gate, const float* x, int64_t m,
                                     const float* up, float* out) = 0;
  // ys[j] = x·W_jᵀ + b_j for matrices sharing x (the Q, K and V projections), in one call so a
  // backend can split all of them over its threads at once (one hand-off instead of one per
  // matrix). ops and ys have the same length; no y aliases x. Default: Linear per matrix.
  virtual absl::Status LinearMany(absl::Span<const LinearOp* const> ops, const float* x, int64_t m,
                                  absl::Span<float* const> ys) {
    for (size_t j = 0; j < ops.size(); ++j) {
      if (absl::Status s = Linear(*ops[j], x, m, ys[j]); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // SwiGLU's two projections of x: up = x·W_upᵀ + b, out = silu(x·W_gateᵀ + b) ⊙ up, both
  // [m][gate.n()] (gate.n() == up_op.n()), in one call (one hand-off). out aliases neither x nor
  // up. Default: Linear, then LinearSiluMul.
  virtual absl::Status LinearGatedUp(const LinearOp& gate, const LinearOp& up_op, const float* x,
                                     int64_t m, float* up, float* out) {
    if (absl::Status s = Linear(up_op, x, m, up); !s.ok()) return s;
    return LinearSiluMul(gate, x, m, up, out);
  }
  // out[i] = table[ids[i]] (rows of `hidden` floats); ids: host [m].
  virtual absl::Status Embedding(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                                 float* out) = 0;
  // y[i] = x[i] / rms(x[i]) * w, rows of n. y may alias x.
  virtual absl::Status RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps,
                               float* y) = 0;
  // Rotates x [m][heads][head_dim] in place by positions (host [m]).
  virtual absl::Status Rope(float* x, int64_t m, int32_t heads, int32_t head_dim,
                            const int64_t* positions, const RopeParams& params) = 0;
  // out[i] = silu(gate[i]) · up[i], n elements. out may alias gate.
  virtual absl::Status SiluMul(const float* gate, const float* up, int64_t n, float* out) = 0;
  // x[i] += y[i], n elements.
  virtual absl::Status Add(float* x, const float* y, int64_t n) = 0;
  // residual += x, then out = RMSNorm(residual) · w, rows of n ([m][n] each): a residual add and
  // the norm that follows it (FlashInfer's fused add + RMSNorm). out may alias x, not residual.
  // Default: Add, then RmsNorm — the same ops the forward runs without it.
  virtual absl::Status AddRmsNorm(float* residual, const float* x, const float* w, int64_t m,
                                  int64_t n, float eps, float* out) {
    if (absl::Status s = Add(residual, x, m * n); !s.ok()) return s;
    return RmsNorm(residual, w, m, n, eps, out);
  }
  // Whether the forward should run a residual projection followed by a norm as Linear +
  // AddRmsNorm (the add fused into the norm) rather than LinearAdd + RmsNorm (the add fused into
  // the GEMM, or a separate Add). Only at tp = 1 (with tp > 1 an all-reduce comes between).
  virtual bool PrefersAddRmsNorm() const { return false; }
  // dst row i = src row index[i] (rows of `cols` floats); index: host [m]; −1 writes zeros.
  virtual absl::Status GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols,
                                  float* dst) = 0;

  // ---- attention (pool: device memory of this backend) ----
  // slots: host [m].
  virtual absl::Status WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots,
                               int64_t m, const float* k, const float* v) = 0;
  // rows: host metadata (request, position, block tables).
  virtual absl::Status Attention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                                 const float* q, int32_t num_q_heads, float scale, float* out,
                                 float* lse) = 0;
  // See attention/lse_merge.h CorrectPartialInPlace; all_lse [n][items] on the device.
  virtual absl::Status CorrectPartial(int32_t n, int32_t me, const float* all_lse, int64_t items,
                                      int32_t head_dim, float* out) = 0;
};

}  // namespace tandem
