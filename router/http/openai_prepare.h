// The router side of an OpenAI request body, before anything is sent to a node: parse the body
// (openai_request.h), make the router's first two checks (model name, prompt shape) so the prompt
// can be tokenised, tokenise it (TokenizeOpenAiPrompt), pick the default token budget and build
// the GenerateInput that RunGenerate runs (no protobuf on the HTTP path). ServeCompletion calls
// this; the fuzzer drives it with arbitrary bodies.
//
// Errors: ParseOpenAiRequest's INVALID_ARGUMENT (with the OpenAI `param` payload), then
// ValidateModelName's NOT_FOUND and ValidatePromptInput's INVALID_ARGUMENT — each is answered
// with HttpStatusFor(code). Later checks (budget, sampling ranges, token ids, context) are the
// router's (PrepareRequest), so both APIs answer with the same messages.
// Pure apart from a random seed when the body gives none; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "router/http/openai_request.h"
#include "router/request_prep.h"
#include "router/served_model.h"

namespace tandem {

struct PreparedOpenAiRequest {
  OpenAiRequest request;
  int32_t prompt_tokens = 0;  // the tokenised prompt's length (for the usage)
  GenerateInput generate;     // the prompt as token ids, budget, sampling, stop behaviour
};

// The prompt's token ids as the nodes get them: ServedModel::Tokenize, without the BOS it added
// when add_special_tokens is false (a chat template writes its own BOS: that one stays), then
// cut to its last truncate_prompt_tokens tokens. Errors: the chat template's (Tokenize).
// REQUIRES: the prompt passed ValidatePromptInput.
absl::StatusOr<std::vector<int32_t>> TokenizeOpenAiPrompt(const ServedModel& model,
                                                          const OpenAiRequest& request);

[[nodiscard]] absl::StatusOr<PreparedOpenAiRequest> PrepareOpenAiRequest(
    const ServedModel& model, OpenAiEndpoint endpoint, absl::string_view body,
    const std::string& request_id);

}  // namespace tandem
