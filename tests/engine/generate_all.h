// Submits every request to a CombinedEngine at once (so they are batched together) and waits for
// all of them, each wait bounded by `timeout`. A request that did not finish in time reports
// DEADLINE_EXCEEDED. Shared by the layout tests of the CPU and CUDA backends.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/combined_engine.h"

namespace tandem::testing {

std::vector<absl::StatusOr<GenerateResult>> GenerateAll(CombinedEngine& engine,
                                                        std::vector<GenerateRequest> requests,
                                                        absl::Duration timeout);

}  // namespace tandem::testing
