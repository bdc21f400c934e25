// A slow, obviously-correct Llama forward in double precision over a whole sequence (no cache,
// no sharding): the reference the engine's logits are checked against. Covers QKV biases, Qwen3's
// per-head Q/K RMSNorm (before RoPE), both RoPE pairings and RoPE frequency divisors.
#pragma once

#include <cstdint>
#include <vector>

#include "model/format/llama_weights.h"

namespace tandem::testing {

// Logits [tokens.size()][vocab] for every position of the sequence.
std::vector<std::vector<double>> ReferenceLogits(const LlamaWeights& w,
                                                 const std::vector<int32_t>& tokens);

}  // namespace tandem::testing
