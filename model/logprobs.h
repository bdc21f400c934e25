// Log-probabilities of a sampled token (pure), as vLLM returns them by default
// (logprobs_mode = raw_logprobs): the f32 log-softmax of the model's logits, before logit_bias,
// penalties, temperature or any truncation (model/sampling.h), so they describe the model, not the
// sampler. Every P/D layout computes the same full-vocabulary logits, so the values are the same
// whichever node samples the token.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace tandem {

struct TokenLogprobs {
  float logprob = 0.f;                         // the sampled token's
  std::vector<std::pair<int32_t, float>> top;  // the most likely ids, most likely first (ties:
                                               // lower id first)

  bool operator==(const TokenLogprobs&) const = default;
};

// REQUIRES: logits non-empty, 0 <= token < logits.size(), top_n >= 0.
TokenLogprobs ComputeLogprobs(absl::Span<const float> logits, int32_t token, int32_t top_n);

}  // namespace tandem
