// Token sampling from logits (pure). Greedy when temperature == 0; otherwise softmax(logits / T)
// restricted by top-k then top-p (nucleus), drawn with a counter-based generator: draw number
// `step` of a request depends only on (seed, step), so the same seed gives the same tokens
// whatever else is batched with the request, and a request resumed elsewhere continues its stream.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tandem {

struct SamplingParams {
  float temperature = 0.f;  // 0 = greedy
  int32_t top_k = 0;        // 0 = disabled
  float top_p = 1.f;        // in (0, 1]
  uint64_t seed = 0;
};

// INVALID_ARGUMENT naming the field for temperature < 0 (or not finite), top_k < 0,
// top_p outside (0, 1].
absl::Status ValidateSamplingParams(const SamplingParams& params);

// Index of the largest logit (lowest index on ties).
int32_t ArgMax(absl::Span<const float> logits);

// Samples a token for draw number `step` of a request.
// REQUIRES: ValidateSamplingParams(params).ok(), logits non-empty.
int32_t SampleToken(absl::Span<const float> logits, const SamplingParams& params, uint64_t step);

// Uniform double in [0, 1) for (seed, step).
double CounterUniform(uint64_t seed, uint64_t step);

}  // namespace tandem
