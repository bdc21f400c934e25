// FlashInfer's RoPE and merge_state in the forms the CUDA backend's ops take
// (model/cuda/flashinfer_ops.h; docs/gpu.md#flashinfer), beside the plain wrappers of
// flashinfer_attention.h. Built from FlashInfer's headers when present (flashinfer_backend_ops.cu,
// flashinfer_rope_bf16.cu), else flashinfer_absent.cc (every launch UNIMPLEMENTED).
//
// * RoPE in place on one tensor x [m][heads][head_dim] at device int64 positions, the backend's
//   Rope(): FlashInfer rotates a q and a k tensor in one launch, so x's heads are split between
//   them (q = the first heads − heads/2, k = the rest, both with x's row stride); heads >= 2.
//   Pair i rotates by pos · theta^(−2i/head_dim), scaled by `scaling` (fi_rope_scaling.h:
//   rope_scale, or Llama 3.1's ramp — BatchQKApplyLlama31RotaryPosIds); `adjacent_pairs` rotates
//   (x[2i], x[2i+1]), else (x[i], x[i + head_dim/2]). head_dim 64, 128, 256 or 512. f32 and bf16
//   (uint16_t bits).
// * The DCP correction (attention/lse_merge.h CorrectPartialInPlace) as one FlashInfer
//   MergeStateInPlace: partial `me` (out, L_me) is merged with a zero partial carrying the other
//   ranks' LSE L_rest = log Σ_{j≠me} exp(L_j), which scales out by exp(L_me)/(exp(L_me) +
//   exp(L_rest)) = exp(L_me − L) and adds nothing. A small kernel of ours forms both base-2 LSEs
//   (FlashInfer's base) in scratch. out must be finite where L_me = −inf (Tandem's attention
//   writes 0 there): it becomes 0·out = 0, as in the CPU correction.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "attention/cuda/flashinfer/fi_rope_scaling.h"

namespace tandem::gpu {

[[nodiscard]] absl::Status LaunchFlashInferRopeInPlace(float* x, int64_t m, int32_t heads,
                                                       int32_t head_dim, const int64_t* positions,
                                                       float theta, bool adjacent_pairs,
                                                       const FiRopeScaling& scaling, void* stream);
[[nodiscard]] absl::Status LaunchFlashInferRopeInPlaceBf16(
    uint16_t* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions, float theta,
    bool adjacent_pairs, const FiRopeScaling& scaling, void* stream);

// Floats of scratch LaunchFlashInferCorrectPartial needs.
inline int64_t FlashInferCorrectScratchFloats(int64_t items) { return 2 * items; }

// all_lse [n][items] (natural log, device), out [items][head_dim] rescaled in place; zeros:
// items · head_dim device floats that are 0 (never written); items_per_block: a divisor of
// items up to 16 (model/cuda/flashinfer_op_choice.h MergeItemsPerBlock).
[[nodiscard]] absl::Status LaunchFlashInferCorrectPartial(int32_t n, int32_t me,
                                                          const float* all_lse, int64_t items,
                                                          int32_t head_dim, float* out,
                                                          const float* zeros, float* scratch,
                                                          int32_t items_per_block, void* stream);

}  // namespace tandem::gpu
