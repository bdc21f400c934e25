// Reference outputs for end-to-end tests: greedy generation on one in-process, single-rank
// combined instance (no transfer) of the same model file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/sampling.h"
#include "model/tools/synthetic_model.h"

namespace tandem::testing {

// Greedy tokens (no stop tokens: exactly max_tokens each) for every prompt, on `backend`.
std::vector<std::vector<int32_t>> ReferenceGreedy(const std::string& model_path,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int32_t max_tokens,
                                                  const std::string& backend = "cpu");

// One prompt sampled with `sampling` (penalties, seed, ... as the router passes them) on the
// single-rank combined instance: its tokens (no stop ids) and, per token, the raw logits it was
// sampled from.
struct ReferenceRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
ReferenceRun ReferenceSampled(const std::string& model_path, const std::vector<int32_t>& prompt,
                              const SamplingParams& sampling, int32_t max_tokens);

// A synthetic GGUF model in a fresh temp dir (written once per process and seed).
std::string SyntheticModelPath(uint64_t seed = 7);

// Writes a synthetic GGUF model with `options` to <fresh temp dir>/<file_name>; "" on failure
// (reported as a test failure).
std::string WriteTempSyntheticModel(const SyntheticModelOptions& options,
                                    const std::string& file_name);

}  // namespace tandem::testing
