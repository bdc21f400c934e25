// llama.cpp's output for a small synthetic model, as bench/peer/reference_logits.sh records it in
// tests/engine/testdata/llamacpp/<name>.txt: the tandem-make-model options that rebuild the model,
// the prompt, llama.cpp's greedy tokens after it and its logits at some prompt positions.
// Reading failures are test failures (gtest), and yield an empty fixture.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/format/llama_weights.h"
#include "model/tools/synthetic_model.h"

namespace tandem::testing {

struct LlamaCppFixture {
  SyntheticModelOptions options;
  std::vector<int32_t> prompt, greedy;
  std::map<int, std::vector<double>> logits;  // prompt position -> llama.cpp's logits
};

// names: "llama", "qwen2", "qwen3", "phi3", "llama3_rope", "qwen2_yarn", "llama_linear".
LlamaCppFixture ReadLlamaCppFixture(const std::string& name);

// The fixture's model, built in memory and loaded as Tandem loads a GGUF file (f32).
LlamaWeights LoadFixtureModel(const LlamaCppFixture& fixture);

}  // namespace tandem::testing
