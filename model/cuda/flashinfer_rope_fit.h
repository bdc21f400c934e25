// Whether FlashInfer's RoPE (attention/cuda/flashinfer/fi_rope_scaling.h) can apply a model's
// per-pair frequency divisors (LlamaConfig::rope_freq_factors, RopeParams::freq_factors), and
// with which arguments (docs/gpu.md#flashinfer).
//
// Tandem rotates pair i by pos · f_i / factor[i], f_i = theta^(−2i/head_dim). FlashInfer's
// multiplier of f_i is (1 − s_i)/rope_scale + s_i with s_i = clamp(f_i·a + b, 0, 1): a plateau
// of 1 (high frequencies), a plateau of 1/rope_scale (low ones) and between them a ramp linear
// in f_i. Llama 3.x's divisors are exactly that shape (model/format/rope_scaling.h: s = (original
// / λ_i − low) / (high − low) with λ_i = 2π / f_i), and so are linear scaling's (every divisor the
// same). YaRN's ramp is linear in the pair index, not in f_i; it is refused (its mscale is refused
// anyway: flashinfer_op_choice.h), as are divisors below 1 and any other array.
//
// The fit, in double: rope_scale = the largest divisor; s_i from each divisor; a line through
// the ramp's two outermost pairs (with fewer than two pairs on the ramp, a line that puts every
// plateau pair past its clamp); the line as FlashInfer's Llama 3.1 arguments (low_freq_factor 1,
// high_freq_factor 1 − 1/b, old_context_length −2π·a/b). Then the check that decides: FlashInfer's
// own float arithmetic on those arguments (FiRopeKernelParamsOf, FiRopeScaledFrequency) must give
// every pair's frequency within kFiRopeFrequencyTolerance of f_i / factor[i], relatively.
//
// Cost: O(head_dim) flops, no allocation — cheap enough to decide on every RoPE call.
// Pure; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "attention/cuda/flashinfer/fi_rope_scaling.h"

namespace tandem::gpu {

// Relative error allowed between FlashInfer's scaled frequency and Tandem's, per pair: 2^-19,
// a few float roundings (the divisors are stored as f32; FlashInfer forms its parameters and
// the product in float). It only matters off the high-frequency plateau (where FlashInfer's
// multiplier is exactly 1), i.e. for f_i well below 1, so the angle error it adds, pos · f_i ·
// 2^-19, stays below FlashInfer's own float angle error (about pos · 2^-21, docs/gpu.md).
inline constexpr double kFiRopeFrequencyTolerance = 1.0 / (1 << 19);

// The arguments for FlashInfer, or InvalidArgument saying why the divisors are not FlashInfer's
// shape (message independent of positions and rows, so callers can log it once).
// freq_factors: head_dim/2 divisors; head_dim even and > 0; theta > 0.
[[nodiscard]] absl::StatusOr<FiRopeScaling> FitFlashInferRopeScaling(const float* freq_factors,
                                                                     int32_t head_dim, float theta);

}  // namespace tandem::gpu
