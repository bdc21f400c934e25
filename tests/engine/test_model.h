// Small random Llama weights built in memory for engine tests (no file I/O). Deterministic for a
// seed. Logit margins are large enough that greedy tokens do not depend on float summation order.
#pragma once

#include <cstdint>

#include "model/format/llama_weights.h"

namespace tandem::testing {

LlamaConfig SmallConfig();  // 2 layers, 8 query heads, 2 KV heads, head_dim 16, vocab 320
LlamaWeights RandomWeights(const LlamaConfig& config, uint64_t seed);

}  // namespace tandem::testing
