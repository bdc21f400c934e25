// Submits every request to a CombinedEngine at once (so they are batched together) and waits for
// all of them, each wait bounded by `timeout`. A request that did not finish in time reports
// DEADLINE_EXCEEDED. Shared by the layout tests of the CPU and CUDA backends.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/combined_engine.h"

namespace tandem::testing {

// One greedy request per prompt (ids "0", "1", ...), max_new_tokens each, logits returned.
std::vector<GenerateRequest> GreedyRequests(const std::vector<std::vector<int32_t>>& prompts,
                                            int32_t max_new_tokens);

std::vector<absl::StatusOr<GenerateResult>> GenerateAll(CombinedEngine& engine,
                                                        std::vector<GenerateRequest> requests,
                                                        absl::Duration timeout);

}  // namespace tandem::testing
