// Turns a GenerateRequest into what the router routes: validated sampling values, prompt ids,
// token budget and stop ids (RequestValidation's order and exact statuses).
// Pure apart from reading the protobuf; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/sampling.h"
#include "router/served_model.h"
#include "tandem/v1/router.pb.h"

namespace tandem {

struct PreparedRequest {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
  SamplingParams sampling;        // validated (an unset top_p is 1)
  std::vector<int32_t> stop_ids;  // the tokenizer's stop ids; empty with ignore_eos
};

[[nodiscard]] absl::StatusOr<PreparedRequest> PrepareRequest(const ServedModel& model,
                                                             const v1::GenerateRequest& request);

}  // namespace tandem
