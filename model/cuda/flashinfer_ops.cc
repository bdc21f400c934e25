#include "model/cuda/flashinfer_ops.h"

#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "attention/cuda/cuda_attention.h"
#include "attention/cuda/decode_attention_plan.h"
#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "attention/cuda/flashinfer/flashinfer_backend_ops.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"
#include "model/cuda/cuda_ops.h"
#include "model/cuda/cuda_ops_bf16.h"

namespace tandem::gpu {
namespace {

uint16_t* B16(float* p) { return reinterpret_cast<uint16_t*>(p); }
const uint16_t* B16(const float* p) { return reinterpret_cast<const uint16_t*>(p); }

// Largest power of two (<= 256) dividing every pointer.
int32_t Alignment(std::initializer_list<const void*> ptrs) {
  int32_t a = 256;
  for (const void* p : ptrs) {
    const auto v = reinterpret_cast<uintptr_t>(p);
    while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  }
  return a;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FlashInferOps>> FlashInferOps::Create(int32_t device, bool bf16,
                                                                     absl::Duration timeout) {
  const char* choice = std::getenv(kCudaAttentionEnv);
  TANDEM_ASSIGN_OR_RETURN(const CudaAttentionKernel kernel,
                          ParseCudaAttentionKernel(choice == nullptr ? "" : choice));
  return std::make_unique<FlashInferOps>(device, bf16, kernel == CudaAttentionKernel::kFlashInfer,
                                         timeout);
}

FlashInferOps::FlashInferOps(int32_t device, bool bf16, bool selected, absl::Duration timeout)
    : device_(device), bf16_(bf16), selected_(selected), timeout_(timeout) {}

bool FlashInferOps::UseFlashInfer(const FiOpRequest& r, FiOpChoice* choice) {
  FiOpChoice c = ChooseFlashInferOp(selected_, FlashInferBuilt(), r);
  if (c.flashinfer) {
    ++calls_[static_cast<size_t>(r.op)];
    if (choice != nullptr) *choice = std::move(c);
    return true;
  }
  if (!c.reason.empty() && logged_.insert(c.reason).second) {
    std::cerr << "cuda backend: TANDEM_CUDA_ATTENTION=flashinfer: " << c.reason
              << "; Tandem's kernel runs" << std::endl;
  }
  return false;
}

absl::Status FlashInferOps::RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps,
                                    float* y, cudaStream_t stream) {
  FiOpRequest r;
  r.op = FiOp::kRmsNorm;
  r.bf16 = bf16_;
  r.cols = n;
  r.alignment = Alignment({x, w, y});
  if (!UseFlashInfer(r)) {
    if (bf16_) return LaunchRmsNormBf16(B16(x), w, m, n, eps, B16(y), stream);
    return LaunchRmsNorm(x, w, m, n, eps, y, stream);
  }
  return LaunchFlashInferRmsNorm(x, w, m, n, eps, y, stream);
}

absl::Status FlashInferOps::AddRmsNorm(float* residual, const float* x, const float* w, int64_t m,
                                       int64_t n, float eps, float* out, cudaStream_t stream) {
  FiOpRequest r;
  r.op = FiOp::kAddRmsNorm;
  r.bf16 = bf16_;
  r.cols = n;
  r.alignment = Alignment({residual, x, w, out});
  r.in_place = out == x;
  if (!UseFlashInfer(r)) {
    if (!bf16_) return LaunchAddRmsNorm(residual, x, w, m, n, eps, out, stream);
    TANDEM_RETURN_IF_ERROR(LaunchAddBf16(B16(residual), B16(x), m * n, stream));
    return LaunchRmsNormBf16(B16(residual), w, m, n, eps, B16(out), stream);
  }
  return LaunchFlashInferAddRmsNorm(out, residual, w, m, n, eps, stream);
}

absl::Status FlashInferOps::Rope(float* x, int64_t m, int32_t heads, int32_t head_dim,
                                 const int64_t* positions, const RopeParams& params,
                                 cudaStream_t stream) {
  FiOpRequest r;
  r.op = FiOp::kRope;
  r.bf16 = bf16_;
  r.cols = head_dim;
  r.heads = heads;
  r.freq_factors = params.freq_factors;
  r.theta = params.theta;
  r.mscale = params.mscale;
  r.alignment = Alignment({x});
  FiOpChoice c;
  if (!UseFlashInfer(r, &c)) {
    if (bf16_) return LaunchRopeBf16(B16(x), m, heads, head_dim, positions, params, stream);
    return LaunchRope(x, m, heads, head_dim, positions, params, stream);
  }
  const bool adjacent = params.style == RopeStyle::kAdjacentPairs;
  if (bf16_) {
    return LaunchFlashInferRopeInPlaceBf16(B16(x), m, heads, head_dim, positions, params.theta,
                                           adjacent, c.rope, stream);
  }
  return LaunchFlashInferRopeInPlace(x, m, heads, head_dim, positions, params.theta, adjacent,
                                     c.rope, stream);
}

absl::Status FlashInferOps::CorrectPartial(int32_t n, int32_t me, const float* all_lse,
                                           int64_t items, int32_t head_dim, float* out,
                                           cudaStream_t stream) {
  FiOpRequest r;
  r.op = FiOp::kCorrectPartial;
  r.bf16 = bf16_;
  r.cols = head_dim;
  if (items <= 0 || !UseFlashInfer(r)) {
    return LaunchCorrectPartial(n, me, all_lse, items, head_dim, out, nullptr, stream);
  }
  TANDEM_RETURN_IF_ERROR(Grow(
      scratch_, FlashInferCorrectScratchFloats(items) * int64_t{sizeof(float)}, false, stream));
  TANDEM_RETURN_IF_ERROR(Grow(zeros_, items * head_dim * int64_t{sizeof(float)}, true, stream));
  return LaunchFlashInferCorrectPartial(n, me, all_lse, items, head_dim, out, zeros_->f32(),
                                        scratch_->f32(), MergeItemsPerBlock(items), stream);
}

absl::Status FlashInferOps::Grow(std::unique_ptr<CudaDeviceBuffer>& buf, int64_t bytes, bool zero,
                                 cudaStream_t stream) {
  if (buf != nullptr && buf->bytes() >= bytes) return absl::OkStatus();
  if (buf != nullptr) {
    TANDEM_RETURN_IF_ERROR(PollUntilDone([&] { return cudaStreamQuery(stream); }, timeout_,
                                         absl::StrCat("cuda:", device_, " flashinfer scratch")));
    buf.reset();
  }
  TANDEM_ASSIGN_OR_RETURN(buf, CudaDeviceBuffer::Create(device_, bytes + bytes / 2));
  if (zero) TANDEM_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(buf->data(), 0, buf->bytes(), stream));
  return absl::OkStatus();
}

}  // namespace tandem::gpu
