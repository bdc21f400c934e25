// Which of the CUDA backend's element-wise ops run through FlashInfer (docs/gpu.md#flashinfer):
// RMSNorm, RoPE and the DCP partial correction (FlashInfer's merge_state), when the FlashInfer
// path is selected (TANDEM_CUDA_ATTENTION=flashinfer) and the binary holds FlashInfer. Every
// other case runs Tandem's kernel (model/cuda/cuda_ops.h, attention/cuda/cuda_attention.h); the
// choice says why, in words that do not depend on the row count, so a caller can log each
// reason once. Decided from shapes, dtypes and alignment only, so it is unit-tested without a
// GPU.
//
// What FlashInfer's ops support (attention/cuda/flashinfer/flashinfer_backend_ops.h):
// * RMSNorm: f32 activations only (FlashInfer takes the weight in the activation dtype and the
//   backend holds f32 norm weights, so bf16 activations keep Tandem's kernel); n a multiple of 4
//   and x, w, y 16-byte aligned (its vector loads).
// * RoPE: f32 or bf16; head_dim 64, 128, 256 or 512; at least 2 heads (the heads are split
//   between FlashInfer's q and k halves of one launch); x 16-byte aligned; mscale 1 (FlashInfer
//   has no magnitude factor: YaRN models keep Tandem's kernel); rope_freq_factors only when
//   FlashInfer's frequency scaling reproduces them (flashinfer_rope_fit.h: Llama 3.x's and
//   linear scaling's divisors do; the choice then carries FlashInfer's arguments).
// * Fused add + RMSNorm (ComputeBackend::AddRmsNorm): as RMSNorm (f32, n a multiple of 4,
//   16-byte aligned), and in place — FlashInfer writes the normed rows over x, so out must be x.
// * Partial correction: f32 outputs (the backend refuses bf16 there anyway); head_dim 64, 128,
//   256 or 512.
//
// Thread-safety: pure functions, reentrant.
#pragma once

#include <cstdint>
#include <string>

#include "attention/cuda/flashinfer/fi_rope_scaling.h"

namespace tandem::gpu {

enum class FiOp : uint8_t { kRmsNorm, kRope, kCorrectPartial, kAddRmsNorm };

const char* FiOpName(FiOp op);

struct FiOpRequest {
  FiOp op = FiOp::kRmsNorm;
  bool bf16 = false;                    // the backend's activations are bf16
  int64_t cols = 0;                     // RMSNorm: n (row length); RoPE, correction: head_dim
  int32_t heads = 0;                    // RoPE only
  const float* freq_factors = nullptr;  // RoPE only: RopeParams::freq_factors (host, cols/2)
  float theta = 10000.f;                // RoPE only
  float mscale = 1.f;                   // RoPE only
  int32_t alignment = 256;  // RMSNorm, RoPE: largest power of two dividing every pointer
  bool in_place = true;     // fused add + RMSNorm only: out == x
};

struct FiOpChoice {
  bool flashinfer = false;
  std::string reason;  // empty when flashinfer; else why Tandem's kernel runs
  FiRopeScaling rope;  // RoPE through FlashInfer: its frequency-scaling arguments
};

// selected: TANDEM_CUDA_ATTENTION=flashinfer. built: FlashInferBuilt(). When not selected the
// reason is empty (nothing to log: Tandem's kernels are the default).
FiOpChoice ChooseFlashInferOp(bool selected, bool built, const FiOpRequest& r);

// Largest power of two <= 16 dividing `items`: the number of (row, head) items FlashInfer's
// merge_state handles per thread block when Tandem's flat [items][head_dim] layout is viewed as
// its [items / g][g][head_dim].
int32_t MergeItemsPerBlock(int64_t items);

}  // namespace tandem::gpu
