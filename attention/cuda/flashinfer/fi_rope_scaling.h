// The frequency scaling FlashInfer's RoPE can apply (flashinfer/pos_enc.cuh, 0.7.4), as the
// parameters of its host functions and as the float arithmetic its kernels do with them, so CPU
// tests check the frequencies the kernel will use (docs/gpu.md#flashinfer).
//
// FlashInfer rotates pair i (of head_dim/2) by pos · f'_i where, with f_i = theta^(−2i/head_dim),
//   s_i  = clamp(f_i · smooth_a + smooth_b, 0, 1)
//   f'_i = (1 − s_i) · (f_i · rope_rcp_scale) + s_i · f_i
// — Llama 3.1's smooth ramp between a scaled (1/rope_scale) low-frequency band and an unscaled
// high-frequency band, the ramp linear in f_i. BatchQKApplyRotaryPosIds passes smooth_a =
// smooth_b = 0 (every frequency divided by rope_scale); BatchQKApplyLlama31RotaryPosIds derives
// them from (low_freq_factor, high_freq_factor, old_context_length). There is no per-pair array
// and no magnitude (mscale) factor.
//
// Pure, header-only; TANDEM_HD functions are host/device-callable.
#pragma once

#include <cstdint>

#include "attention/hd.h"

namespace tandem::gpu {

// Arguments of FlashInfer's RoPE host functions. llama31 false: BatchQKApplyRotaryPosIds with
// rope_scale; true: BatchQKApplyLlama31RotaryPosIds with all four.
struct FiRopeScaling {
  bool llama31 = false;
  float rope_scale = 1.f;
  float low_freq_factor = 1.f;
  float high_freq_factor = 4.f;
  float old_context_length = 8192.f;
};

// The kernel's parameters, computed as FlashInfer's host functions compute them (float
// variables; smooth_a's expression is evaluated in double — M_PI is a double — then stored).
struct FiRopeKernelParams {
  float smooth_a = 0.f;
  float smooth_b = 0.f;
  float rope_rcp_scale = 1.f;
};

TANDEM_HD inline FiRopeKernelParams FiRopeKernelParamsOf(const FiRopeScaling& s) {
  FiRopeKernelParams p;
  p.rope_rcp_scale = 1.0f / s.rope_scale;
  if (s.llama31) {
    constexpr double kPi = 3.14159265358979323846;
    p.smooth_a = static_cast<float>(s.old_context_length /
                                    (2 * kPi * s.high_freq_factor - 2 * kPi * s.low_freq_factor));
    p.smooth_b = -1.0f / (s.high_freq_factor / s.low_freq_factor - 1.0f);
  }
  return p;
}

// f'_i for the kernel's base frequency f_i (float, as the kernel computes it).
TANDEM_HD inline float FiRopeScaledFrequency(float base, const FiRopeKernelParams& p) {
  float smooth = base * p.smooth_a + p.smooth_b;
  smooth = smooth < 0.0f ? 0.0f : (smooth > 1.0f ? 1.0f : smooth);
  return (1 - smooth) * (base * p.rope_rcp_scale) + smooth * base;
}

// The pair whose frequency element j (of head_dim) of a head rotates with, as FlashInfer's
// kernels index it: interleave (Tandem's kAdjacentPairs) pairs (2i, 2i+1), else (kRotateHalf)
// (i, i + head_dim/2).
TANDEM_HD constexpr int32_t FiRopePairOf(int32_t element, int32_t head_dim, bool interleave) {
  return interleave ? element / 2 : element % (head_dim / 2);
}

}  // namespace tandem::gpu
