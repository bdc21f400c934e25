// The request fields the OpenAI endpoints know (POST /v1/chat/completions and /v1/completions,
// with vLLM's extensions), and the rule that none is silently ignored: every known field is
// honoured (parsed by ParseOpenAiRequest) or, when it asks for something Tandem does not do, the
// request is refused with INVALID_ARGUMENT naming it (the OpenAI error's `param`). A field at
// its default value (absent, null, or the value that changes nothing: false, 0, 1 for
// multiplicative penalties, [] / {} for lists and maps, {"type": "text"} for response_format,
// ...) is accepted, because it asks for nothing. Fields not listed here are unknown: ignored,
// as vLLM does, and reported (UnknownFields) so the caller can log each name once.
//
// docs/router.md ("HTTP API", "Request fields") lists the same fields with their behaviour.
// Pure; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "router/http/openai_request.h"

namespace tandem {

// INVALID_ARGUMENT for the first known field of `body` (a JSON object) that asks for something
// Tandem does not implement, naming it; OK otherwise. The fields ParseOpenAiRequest parses
// (model, messages, prompt, sampling, stop, stream, ...) are not checked here.
[[nodiscard]] absl::Status RefuseUnsupportedFields(OpenAiEndpoint endpoint,
                                                   const nlohmann::json& body);

// The top-level keys of `body` that `endpoint` does not know, in name order.
std::vector<std::string> UnknownFields(OpenAiEndpoint endpoint, const nlohmann::json& body);

// Whether `field` is a top-level field `endpoint` knows.
bool IsKnownField(OpenAiEndpoint endpoint, const std::string& field);

// Every top-level field `endpoint` knows (for the docs check).
std::vector<std::string> KnownFields(OpenAiEndpoint endpoint);

}  // namespace tandem
