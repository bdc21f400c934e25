#include "model/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "attention/cuda/cuda_attention.h"
#include "common/cuda/cuda_buffer.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/cuda_stream.h"
#include "common/cuda/staged_upload.h"
#include "common/status_macros.h"
#include "model/cuda/attention_runner.h"
#include "model/cuda/cuda_linear.h"
#include "model/cuda/cuda_ops.h"
#include "model/cuda/cuda_ops_bf16.h"
#include "model/cuda/flashinfer_ops.h"
#include "model/cuda/gemm_plan.h"
#include "model/cuda/graph_runner.h"
#include "model/cuda/lt_gemm.h"

namespace tandem {
namespace {

// Ops may be called from a thread whose current device is another one (two backends on one test
// thread): make this backend's device current for the op, restoring the caller's afterwards.
#define TANDEM_ON_BACKEND_DEVICE()                       \
  const gpu::ScopedDevice tandem_device_scope_(device_); \
  TANDEM_RETURN_IF_ERROR(tandem_device_scope_.status())

using gpu::AttentionRunner;
using gpu::CudaActivations;
using gpu::CudaBackendOptions;
using gpu::CudaDeviceBuffer;
using gpu::CudaLinear;
using gpu::CudaStream;
using gpu::StagedUpload;

// A device allocation seen through the backend's DeviceBuffer interface.
class BackendBuffer final : public DeviceBuffer {
 public:
  explicit BackendBuffer(std::unique_ptr<CudaDeviceBuffer> buffer) : buffer_(std::move(buffer)) {}
  void* data() const override { return buffer_->data(); }
  int64_t bytes() const override { return buffer_->bytes(); }

 private:
  std::unique_ptr<CudaDeviceBuffer> buffer_;
};

class CublasHandle {
 public:
  static absl::StatusOr<std::unique_ptr<CublasHandle>> Create(int32_t device, cudaStream_t stream) {
    const gpu::ScopedDevice scope(device);
    TANDEM_RETURN_IF_ERROR(scope.status());
    cublasHandle_t h = nullptr;
    TANDEM_RETURN_IF_ERROR(gpu::ToStatus(cublasCreate(&h), "cublasCreate"));
    auto handle = std::unique_ptr<CublasHandle>(new CublasHandle(device, h));
    TANDEM_RETURN_IF_ERROR(gpu::ToStatus(cublasSetStream(h, stream), "cublasSetStream"));
    return handle;
  }
  ~CublasHandle() {
    const gpu::ScopedDevice scope(device_);
    cublasDestroy(handle_);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  CublasHandle(int32_t device, cublasHandle_t h) : device_(device), handle_(h) {}
  const int32_t device_;
  const cublasHandle_t handle_;
};

class CudaBackend final : public ComputeBackend {
 public:
  static absl::StatusOr<std::unique_ptr<ComputeBackend>> Create(int32_t device,
                                                                const CudaBackendOptions& options) {
    TANDEM_RETURN_IF_ERROR(gpu::CheckCudaDevice(device));
    // The rank thread works on this device from now on (kernels launch on the current device).
    TANDEM_RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
    std::unique_ptr<CudaBackend> b(new CudaBackend(device, options));
    TANDEM_ASSIGN_OR_RETURN(b->stream_, CudaStream::Create(device));
    const cudaStream_t s = b->stream_->get();
    TANDEM_ASSIGN_OR_RETURN(b->cublas_, CublasHandle::Create(device, s));
    TANDEM_ASSIGN_OR_RETURN(b->attention_, AttentionRunner::Create(device, s, kCudaWaitTimeout));
    TANDEM_ASSIGN_OR_RETURN(b->fi_ops_,
                            gpu::FlashInferOps::Create(device, b->bf16_, kCudaWaitTimeout));
    TANDEM_ASSIGN_OR_RETURN(b->positions_, StagedUpload::Create(device, s, kCudaWaitTimeout));
    TANDEM_ASSIGN_OR_RETURN(b->indices_, StagedUpload::Create(device, s, kCudaWaitTimeout));
    if (b->bf16_) {
      TANDEM_ASSIGN_OR_RETURN(b->lt_, gpu::LtGemm::Create(device, s));
    }
    if (options.graphs) {
      // cuBLAS must not allocate its workspace inside stream capture: give it one.
      TANDEM_ASSIGN_OR_RETURN(b->cublas_workspace_,
                              CudaDeviceBuffer::Create(device, int64_t{32} << 20));
      TANDEM_RETURN_IF_ERROR(
          gpu::ToStatus(cublasSetWorkspace(b->cublas_->get(), b->cublas_workspace_->data(),
                                           static_cast<size_t>(b->cublas_workspace_->bytes())),
                        "cublasSetWorkspace"));
      TANDEM_ASSIGN_OR_RETURN(b->graph_,
                              gpu::GraphRunner::Create(device, s, options, kCudaWaitTimeout));
    }
    gpu::BindStreamToThisThread(b->stream_);
    return std::unique_ptr<ComputeBackend>(std::move(b));
  }

  std::string_view name() const override { return "cuda"; }
  std::string device_key() const override { return absl::StrCat("cuda:", device_); }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int64_t bytes) override {
    TANDEM_ON_BACKEND_DEVICE();
    // Recorded ops may point at a buffer the caller frees once this one replaces it: run them.
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CudaDeviceBuffer> b,
                            CudaDeviceBuffer::Create(device_, bytes));
    return std::unique_ptr<DeviceBuffer>(std::make_unique<BackendBuffer>(std::move(b)));
  }

  absl::Status Upload(void* dst, const void* host_src, int64_t bytes) override {
    if (bytes <= 0) return CheckBytes(bytes);
    TANDEM_ON_BACKEND_DEVICE();
    // A copy from pageable memory first waits for the stream without a bound: drain it here.
    TANDEM_RETURN_IF_ERROR(Synchronize());
    TANDEM_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream()));
    return absl::OkStatus();
  }

  absl::Status Download(void* host_dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return CheckBytes(bytes);
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_RETURN_IF_ERROR(Synchronize());
    TANDEM_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
    return WaitStream();
  }

  absl::Status Copy(void* dst, const void* src, int64_t bytes) override {
    TANDEM_ON_BACKEND_DEVICE();
    if (bytes <= 0 || dst == src) return CheckBytes(bytes);
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    const auto* d = static_cast<const char*>(dst);
    const auto* s = static_cast<const char*>(src);
    if (d < s + bytes && s < d + bytes) {
      // Overlapping ranges (memmove semantics): go through scratch.
      TANDEM_ASSIGN_OR_RETURN(void* tmp, Scratch(copy_scratch_, bytes));
      TANDEM_RETURN_IF_CUDA_ERROR(
          cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, stream()));
      src = tmp;
    }
    TANDEM_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    return WaitStream();
  }

  // Before a collective (NCCL enqueues on this stream, engine/nccl_communicator.cc): the pending
  // graph piece is launched — replayed, captured or run — so the collective follows its kernels.
  // Pieces end at collectives rather than capturing NCCL into them (docs/gpu.md#cuda-graphs).
  absl::Status Flush() override {
    TANDEM_ON_BACKEND_DEVICE();
    return FlushGraph();
  }

  absl::StatusOr<std::unique_ptr<LinearOp>> PrepareLinear(const float* w, int64_t n, int64_t k,
                                                          const float* bias) override {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CudaLinear> op,
                            CudaLinear::Create(device_, stream(), w, n, k, bias, kCudaWaitTimeout));
    return std::unique_ptr<LinearOp>(std::move(op));
  }

  ActivationDType activation_dtype() const override {
    return bf16_ ? ActivationDType::kBF16 : ActivationDType::kF32;
  }

  int64_t PaddedRows(int64_t rows) const override {
    return graph_ == nullptr ? rows : graph_->PaddedRows(rows);
  }

  absl::Status Linear(const LinearOp& op, const float* x, int64_t m, float* y) override {
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_ASSIGN_OR_RETURN(const CudaLinear* linear, Mine(op));
    return Exec(m, {kOpLinear, Word(linear), m, Word(x), Word(y)}, nullptr, 0, nullptr,
                [this, linear, x, m, y](const void*) -> absl::Status {
                  if (bf16_) {
                    return GemmBf16(*linear, x, m, y, gpu::GemmDType::kBF16, false);
                  }
                  TANDEM_ASSIGN_OR_RETURN(
                      void* x16,
                      Scratch(bf16_scratch_, m * linear->k() * int64_t{sizeof(uint16_t)}));
                  return linear->Forward(cublas_->get(), x, m, static_cast<uint16_t*>(x16), y);
                });
  }

  absl::Status LinearF32Out(const LinearOp& op, const float* x, int64_t m, float* y) override {
    if (!bf16_) return Linear(op, x, m, y);
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_ASSIGN_OR_RETURN(const CudaLinear* linear, Mine(op));
    return Exec(m, {kOpLinearF32, Word(linear), m, Word(x), Word(y)}, nullptr, 0, nullptr,
                [this, linear, x, m, y](const void*) {
                  return GemmBf16(*linear, x, m, y, gpu::GemmDType::kF32, false);
                });
  }

  // f32 activations: the GEMM, then the element-wise kernel. bf16: the residual add is the
  // GEMM's beta = 1 (cuBLASLt or cublasGemmEx), no separate kernel.
  absl::Status LinearAdd(const LinearOp& op, const float* x, int64_t m, float* y,
                         float* scratch) override {
    if (bf16_) {
      TANDEM_ON_BACKEND_DEVICE();
      TANDEM_ASSIGN_OR_RETURN(const CudaLinear* linear, Mine(op));
      return Exec(m, {kOpLinearAdd, Word(linear), m, Word(x), Word(y)}, nullptr, 0, nullptr,
                  [this, linear, x, m, y](const void*) {
                    return GemmBf16(*linear, x, m, y, gpu::GemmDType::kBF16, true);
                  });
    }
    TANDEM_RETURN_IF_ERROR(Linear(op, x, m, scratch));
    return AddRows(y, scratch, m, op.n());
  }
  // SiLU has no cuBLASLt epilogue and needs `up` (gemm_plan.h): the GEMM, then SiluMul.
  absl::Status LinearSiluMul(const LinearOp& gate, const float* x, int64_t m, const float* up,
                             float* out) override {
    TANDEM_RETURN_IF_ERROR(Linear(gate, x, m, out));
    const int64_t n = m * gate.n();
    return Exec(m, {kOpSiluMul, n, Word(out), Word(up)}, nullptr, 0, nullptr,
                [this, out, up, n](const void*) { return SiluMulNow(out, up, n, out); });
  }

  absl::Status Embedding(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                         float* out) override {
    TANDEM_ON_BACKEND_DEVICE();
    for (int64_t i = 0; i < m; ++i) {
      if (ids[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("embedding: id ", ids[i], " at row ", i));
      }
    }
    return Exec(m, {kOpEmbedding, Word(table), m, hidden, Word(out)}, ids,
                m * int64_t{sizeof(int32_t)}, indices_.get(),
                [this, table, m, hidden, out](const void* d_ids) {
                  const auto* id = static_cast<const int32_t*>(d_ids);
                  if (bf16_) {
                    return gpu::LaunchEmbeddingBf16(table, id, m, hidden, B16(out), stream());
                  }
                  return gpu::LaunchEmbedding(table, id, m, hidden, out, stream());
                });
  }

  absl::Status RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps,
                       float* y) override {
    TANDEM_ON_BACKEND_DEVICE();
    return Exec(m, {kOpRmsNorm, Word(x), Word(w), m, n, Word(y), FloatWord(eps)}, nullptr, 0,
                nullptr, [this, x, w, m, n, eps, y](const void*) {
                  return fi_ops_->RmsNorm(x, w, m, n, eps, y, stream());
                });
  }

  absl::Status Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
                    const RopeParams& params) override {
    TANDEM_ON_BACKEND_DEVICE();
    return Exec(
        m,
        {kOpRope, Word(x), m, heads, head_dim, FloatWord(params.theta),
         static_cast<int64_t>(params.style), Word(params.freq_factors), FloatWord(params.mscale)},
        positions, m * int64_t{sizeof(int64_t)}, positions_.get(),
        [this, x, m, heads, head_dim, params](const void* d_pos) {
          const auto* pos = static_cast<const int64_t*>(d_pos);
          return fi_ops_->Rope(x, m, heads, head_dim, pos, params, stream());
        });
  }

  absl::Status SiluMul(const float* gate, const float* up, int64_t n, float* out) override {
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    return SiluMulNow(gate, up, n, out);
  }

  absl::Status Add(float* x, const float* y, int64_t n) override {
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    return AddNow(x, y, n);
  }

  // f32 activations: the residual add is a separate kernel after the GEMM (LinearAdd), so the
  // forward fuses it into the next norm instead — FlashInfer's FusedAddRMSNorm or ours. bf16:
  // the add already is the GEMM's beta = 1.
  bool PrefersAddRmsNorm() const override { return !bf16_; }
  absl::Status AddRmsNorm(float* residual, const float* x, const float* w, int64_t m, int64_t n,
                          float eps, float* out) override {
    TANDEM_ON_BACKEND_DEVICE();
    return Exec(m,
                {kOpAddRmsNorm, Word(residual), Word(x), Word(w), m, n, Word(out), FloatWord(eps)},
                nullptr, 0, nullptr, [this, residual, x, w, m, n, eps, out](const void*) {
                  return fi_ops_->AddRmsNorm(residual, x, w, m, n, eps, out, stream());
                });
  }

  absl::Status GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols,
                          float* dst) override {
    TANDEM_ON_BACKEND_DEVICE();
    for (int64_t i = 0; i < m; ++i) {
      if (index[i] < -1) {
        return absl::InvalidArgumentError(absl::StrCat("gather_rows: index ", index[i], " at row ",
                                                       i,
                                                       " (only -1 is allowed "
                                                       "below 0)"));
      }
    }
    return Exec(m, {kOpGather, Word(src), m, cols, Word(dst)}, index, m * int64_t{sizeof(int64_t)},
                indices_.get(), [this, src, m, cols, dst](const void* d_index) {
                  const auto* idx = static_cast<const int64_t*>(d_index);
                  if (bf16_) {
                    return gpu::LaunchGatherRowsBf16(B16(src), idx, m, cols, B16(dst), stream());
                  }
                  return gpu::LaunchGatherRows(src, idx, m, cols, dst, stream());
                });
  }

  absl::Status WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t m,
                       const float* k, const float* v) override {
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    // bf16 K/V go into the KV write as they are (attention_runner.h).
    return attention_->WriteKv(pool, layer, slots, m, k, v, activation_dtype());
  }

  absl::Status Attention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                         const float* q, int32_t num_q_heads, float scale, float* out,
                         float* lse) override {
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    // bf16 q/out as they are (the runner converts only on Tandem's kernels' path); lse is f32.
    return attention_->Attention(pool, layer, rows, q, num_q_heads, scale, out, lse,
                                 activation_dtype());
  }

  absl::Status CorrectPartial(int32_t n, int32_t me, const float* all_lse, int64_t items,
                              int32_t head_dim, float* out) override {
    TANDEM_ON_BACKEND_DEVICE();
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    if (!bf16_) return fi_ops_->CorrectPartial(n, me, all_lse, items, head_dim, out, stream());
    // bf16 partial outputs (DCP with bf16 activations): the f32 correction on a widened copy,
    // rounded back once — the scale exp(L_me − L) is applied in f32 as in f32 mode.
    const int64_t count = items * head_dim;
    TANDEM_ASSIGN_OR_RETURN(void* o32, Scratch(correct_scratch_, count * int64_t{sizeof(float)}));
    float* out32 = static_cast<float*>(o32);
    TANDEM_RETURN_IF_ERROR(gpu::LaunchBf16ToF32(B16(out), count, out32, stream()));
    TANDEM_RETURN_IF_ERROR(
        fi_ops_->CorrectPartial(n, me, all_lse, items, head_dim, out32, stream()));
    return gpu::LaunchToBf16(out32, count, B16(out), stream());
  }

 private:
  CudaBackend(int32_t device, const CudaBackendOptions& options)
      : device_(device), bf16_(options.activations == CudaActivations::kBF16) {}

  cudaStream_t stream() const { return stream_->get(); }

  // Signature words of recorded ops (graph_runner.h): kinds, then sizes and device pointers.
  enum OpKind : int64_t {
    kOpLinear = 1,
    kOpLinearF32,
    kOpLinearAdd,
    kOpSiluMul,
    kOpAdd,
    kOpEmbedding,
    kOpRmsNorm,
    kOpRope,
    kOpGather,
    kOpAddRmsNorm
  };
  static int64_t Word(const void* p) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(p)); }
  static int64_t FloatWord(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, sizeof(u));
    return u;
  }

  absl::Status WaitStream() {
    return gpu::PollUntilDone([&] { return cudaStreamQuery(stream()); }, kCudaWaitTimeout,
                              absl::StrCat("cuda:", device_, " stream synchronize"));
  }
  absl::Status FlushGraph() { return graph_ == nullptr ? absl::OkStatus() : graph_->Flush(); }

  // Runs `body` now, or — with CUDA graphs on and `rows` within the captured range — records it
  // into the pending piece (graph_runner.h). meta_host/meta_bytes: host metadata the body needs
  // on the device (its device address is the body's argument; nullptr when none); it travels in
  // the piece's arena when recorded and through `eager_upload` when run now.
  absl::Status Exec(int64_t rows, std::initializer_list<int64_t> signature, const void* meta_host,
                    int64_t meta_bytes, gpu::StagedUpload* eager_upload,
                    std::function<absl::Status(const void*)> body) {
    if (graph_ != nullptr && graph_->Records(rows)) {
      const int64_t offset = meta_bytes > 0 ? graph_->Stage(meta_host, meta_bytes) : -1;
      graph_->Record(rows, signature,
                     [offset, body = std::move(body)](const char* meta) -> absl::Status {
                       return body(offset < 0 ? nullptr : meta + offset);
                     });
      return absl::OkStatus();
    }
    TANDEM_RETURN_IF_ERROR(FlushGraph());
    const void* device_meta = nullptr;
    if (meta_bytes > 0) {
      TANDEM_ASSIGN_OR_RETURN(device_meta, eager_upload->Upload(meta_host, meta_bytes));
    }
    return body(device_meta);
  }

  absl::Status SiluMulNow(const float* gate, const float* up, int64_t n, float* out) {
    if (bf16_) return gpu::LaunchSiluMulBf16(B16(gate), B16(up), n, B16(out), stream());
    return gpu::LaunchSiluMul(gate, up, n, out, stream());
  }
  absl::Status AddNow(float* x, const float* y, int64_t n) {
    if (bf16_) return gpu::LaunchAddBf16(B16(x), B16(y), n, stream());
    return gpu::LaunchAdd(x, y, n, stream());
  }
  // x += y over [rows][cols] (LinearAdd's residual on f32 activations), recordable.
  absl::Status AddRows(float* x, const float* y, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    return Exec(rows, {kOpAdd, Word(x), Word(y), n}, nullptr, 0, nullptr,
                [this, x, y, n](const void*) { return AddNow(x, y, n); });
  }

  // With bf16 activations the engine's float* buffers hold bf16.
  static uint16_t* B16(float* p) { return reinterpret_cast<uint16_t*>(p); }
  static const uint16_t* B16(const float* p) { return reinterpret_cast<const uint16_t*>(p); }

  absl::StatusOr<const CudaLinear*> Mine(const LinearOp& op) const {
    const auto* linear = dynamic_cast<const CudaLinear*>(&op);
    if (linear == nullptr || linear->device() != device_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda:", device_, ": the LinearOp was not prepared by a CUDA backend of this device"));
    }
    return linear;
  }

  // Largest power of two (<= 256) dividing every non-null pointer.
  static int32_t Alignment(std::initializer_list<const void*> ptrs) {
    int32_t a = 256;
    for (const void* p : ptrs) {
      if (p == nullptr) continue;
      const auto v = reinterpret_cast<uintptr_t>(p);
      while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
    }
    return a;
  }

  // y (+)= x·Wᵀ + b with x bf16 and y in `out`, planned by gemm_plan.h: cuBLASLt with the
  // bias as an epilogue, or cublasGemmEx and a bias kernel.
  absl::Status GemmBf16(const CudaLinear& op, const float* x, int64_t m, float* y,
                        gpu::GemmDType out, bool accumulate) {
    if (m == 0) return absl::OkStatus();
    const bool out16 = out == gpu::GemmDType::kBF16;
    const void* bias = op.bias_f32() == nullptr
                           ? nullptr
                           : (out16 ? static_cast<const void*>(op.bias_bf16()) : op.bias_f32());
    gpu::GemmRequest r;
    r.m = m;
    r.n = op.n();
    r.k = op.k();
    r.out = out;
    r.bias = bias != nullptr;
    r.accumulate = accumulate;
    r.sm_major = lt_->sm_major();
    r.pointer_alignment = Alignment({x, op.weight(), y, bias});
    TANDEM_ASSIGN_OR_RETURN(const gpu::GemmPlan plan, gpu::PlanGemm(r));
    if (plan.lt) return lt_->Run(plan, op.weight(), x, y, bias);
    TANDEM_RETURN_IF_ERROR(
        op.ForwardBf16In(cublas_->get(), B16(x), m, y, out16, accumulate ? 1.f : 0.f));
    if (!plan.bias_kernel) return absl::OkStatus();
    if (out16) return gpu::LaunchAddBiasBf16(B16(y), op.bias_f32(), m, op.n(), stream());
    return gpu::LaunchAddBias(y, op.bias_f32(), m, op.n(), stream());
  }

  static absl::Status CheckBytes(int64_t bytes) {
    if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("negative size ", bytes));
    return absl::OkStatus();
  }

  // Grow-only device scratch; growing waits for queued work that may use the old buffer.
  absl::StatusOr<void*> Scratch(std::unique_ptr<CudaDeviceBuffer>& buf, int64_t bytes) {
    if (buf == nullptr || buf->bytes() < bytes) {
      // Not Synchronize: this may run inside a graph piece's flush (it fails inside capture,
      // which then falls back to running the piece eagerly).
      TANDEM_RETURN_IF_ERROR(WaitStream());
      // Captured kernels may point at the old buffer: only the f32 path's GEMM input scratch is
      // used inside graph pieces (the others serve eager ops).
      if (graph_ != nullptr && &buf == &bf16_scratch_) graph_->InvalidateAll();
      buf.reset();
      TANDEM_ASSIGN_OR_RETURN(buf, CudaDeviceBuffer::Create(device_, bytes + bytes / 2));
    }
    return buf->data();
  }

  const int32_t device_;
  const bool bf16_;
  // Destroyed last (declared first): everything below enqueues on it.
  std::shared_ptr<CudaStream> stream_;
  std::unique_ptr<CudaDeviceBuffer> cublas_workspace_;  // CUDA graphs only; outlives cublas_
  std::unique_ptr<CublasHandle> cublas_;
  std::unique_ptr<AttentionRunner> attention_;
  // RMSNorm, RoPE, DCP correction: FlashInfer's under TANDEM_CUDA_ATTENTION=flashinfer, else ours.
  std::unique_ptr<gpu::FlashInferOps> fi_ops_;
  std::unique_ptr<StagedUpload> positions_;  // Rope positions (same on every layer of a step)
  std::unique_ptr<StagedUpload> indices_;    // embedding ids, gather indices
  std::unique_ptr<CudaDeviceBuffer> bf16_scratch_;
  std::unique_ptr<CudaDeviceBuffer> copy_scratch_;
  std::unique_ptr<gpu::LtGemm> lt_;                    // bf16 activations only
  std::unique_ptr<gpu::GraphRunner> graph_;            // CUDA graphs only
  std::unique_ptr<CudaDeviceBuffer> correct_scratch_;  // bf16 mode: f32 copy CorrectPartial scales
};

#undef TANDEM_ON_BACKEND_DEVICE

}  // namespace

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(
    int32_t device_index, const gpu::CudaBackendOptions& options) {
  return CudaBackend::Create(device_index, options);
}

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(int32_t device_index) {
  TANDEM_ASSIGN_OR_RETURN(const gpu::CudaBackendOptions options,
                          gpu::ParseCudaBackendOptions(std::getenv("TANDEM_CUDA_ACTIVATIONS"),
                                                       std::getenv("TANDEM_CUDA_GRAPHS")));
  return CudaBackend::Create(device_index, options);
}

}  // namespace tandem
