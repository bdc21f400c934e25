// Parsing of the OpenAI request fields that drive the sampler beyond temperature/top_p/top_k/seed
// (vLLM's names and semantics, model/sampling.h): min_p, repetition_penalty, presence_penalty,
// frequency_penalty, logit_bias ({"token id": bias}, clamped to [-100, 100] as vLLM does),
// min_tokens and stop_token_ids; and logprobs / top_logprobs. Pure; thread-safe.
//
// Type errors are INVALID_ARGUMENT naming the field (OpenAiInvalidParam). Ranges are left to the
// router's checks (ValidateSamplingParams, ValidateSamplingForModel), which name the field too,
// so the HTTP and gRPC APIs answer alike.
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "router/http/openai_request.h"

namespace tandem {

// Sets request.sampling's min_p, penalties, logit_bias and min_tokens, and
// request.stop_token_ids, from `body` (a JSON object). Absent or null fields keep their defaults.
[[nodiscard]] absl::Status ParseOpenAiSamplerFields(const nlohmann::json& body,
                                                    OpenAiRequest& request);

// Sets request.sampling.logprobs (-1: none) from `body`: chat's `logprobs` (a boolean) and
// `top_logprobs` (0..kMaxLogprobs, only with logprobs true, as vLLM), completions' `logprobs`
// (a count, 0..kMaxLogprobs; 0 = the sampled tokens' only). INVALID_ARGUMENT naming the field
// otherwise. REQUIRES: request.endpoint set.
[[nodiscard]] absl::Status ParseOpenAiLogprobs(const nlohmann::json& body, OpenAiRequest& request);

}  // namespace tandem
