// Turns a Generate request into what the router routes: validated sampling values, prompt ids,
// token budget and stop ids (RequestValidation's order and exact statuses). A request arrives as
// a GenerateInput: the gRPC service converts its GenerateRequest (GenerateInputFromProto), the
// HTTP API builds one from the OpenAI request, with no protobuf in between.
// Pure apart from reading the protobuf; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/sampling.h"
#include "router/request_validation.h"
#include "router/served_model.h"
#include "tandem/v1/router.pb.h"

namespace tandem {

// A Generate request as a client sent it (GenerateRequest's fields), not yet validated.
struct GenerateInput {
  std::string model;  // empty: the router's model
  PromptInput prompt;
  SamplingParams sampling;  // min_tokens_stop_ids is the router's own (PrepareRequest)
  int32_t max_tokens = 0;
  int32_t n = 0;           // choices; 0 = 1
  std::string request_id;  // empty: the router assigns one
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  bool strict = false;
};

GenerateInput GenerateInputFromProto(const v1::GenerateRequest& request);

struct PreparedRequest {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
  // Validated (an unset top_p is 1; a grammar parses); min_tokens_stop_ids = stop_ids when
  // min_tokens > 0 or a grammar is set (empty otherwise, whatever the client sent).
  SamplingParams sampling;
  // The tokenizer's stop ids unless ignore_eos, then the request's stop_token_ids (each id once).
  std::vector<int32_t> stop_ids;
  // Choices (GenerateRequest.n; an unset 0 is 1), in [1, kMaxChoices].
  int32_t n = 1;
};

[[nodiscard]] absl::StatusOr<PreparedRequest> PrepareRequest(const ServedModel& model,
                                                             const GenerateInput& request);
// PrepareRequest(model, GenerateInputFromProto(request)).
[[nodiscard]] absl::StatusOr<PreparedRequest> PrepareRequest(const ServedModel& model,
                                                             const v1::GenerateRequest& request);

}  // namespace tandem
