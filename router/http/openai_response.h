// OpenAI response bodies (as vLLM sends them) and server-sent-event framing for the router's HTTP
// API: whole chat / text completions, streaming chunks, the usage chunk, the model list, and
// error objects with the HTTP status a client expects for each status code. Pure; thread-safe.
//
// Error objects: {"error": {"message", "type", "param", "code"}}. The rule for every error the
// router's HTTP API sends (400s, 401, 404 and 405 of the server, 413, 429, 5xx, and an error
// event in a stream): `code` is the HTTP status as a number (vLLM's convention), `type` is
// ErrorType(code), `param` names the request field at fault or is null.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "router/http/openai_request.h"

namespace tandem {

// What every body of one response shares.
struct CompletionMeta {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kChatCompletions;
  std::string id;       // "chatcmpl-<request id>" / "cmpl-<request id>" (CompletionId)
  int64_t created = 0;  // unix seconds
  std::string model;
  std::string system_fingerprint;  // SystemFingerprint(); empty = the field is left out
};

struct CompletionUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens the prefix cache served (prompt_tokens_details)
};

std::string CompletionId(OpenAiEndpoint endpoint, absl::string_view request_id);

// A whole (stream: false) response: chat.completion or text_completion. `logprobs_json`: the
// choice's serialized logprobs object (openai_logprobs.h); empty = null.
std::string CompletionBody(const CompletionMeta& meta, absl::string_view text,
                           absl::string_view finish_reason, const CompletionUsage& usage,
                           absl::string_view logprobs_json = {});

// One choice of a whole response (n > 1: CompletionChoicesBody).
struct CompletionChoice {
  int32_t index = 0;
  std::string text;
  std::string finish_reason;
  std::string logprobs_json;  // as CompletionBody's
};
// A whole response with these choices, in the given order.
std::string CompletionChoicesBody(const CompletionMeta& meta,
                                  const std::vector<CompletionChoice>& choices,
                                  const CompletionUsage& usage);

// One streaming chunk. Chat: `role` adds "role": "assistant" to the delta (the first chunk);
// `finish_reason` empty = null (a content chunk); with `usage_field` the chunk carries
// "usage": null (stream_options.include_usage asks for it on every chunk but the last).
// `logprobs_json` as CompletionBody's, for the tokens of this chunk.
// `index`: the choice (n > 1).
std::string ChunkBody(const CompletionMeta& meta, absl::string_view text, bool role,
                      absl::string_view finish_reason, bool usage_field,
                      absl::string_view logprobs_json = {}, int32_t index = 0);
// The last chunk with stream_options.include_usage: no choices, the usage.
std::string UsageChunkBody(const CompletionMeta& meta, const CompletionUsage& usage);

// "data: <json>\n\n" and the stream's end marker.
std::string SseEvent(absl::string_view json);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// GET /v1/models: the served model, with vLLM's max_model_len (the context length).
std::string ModelsBody(absl::string_view model, int64_t created, int64_t max_model_len);

// "fp_" + 16 hex digits: FNV-1a 64 of the Tandem version, the served model's name, context
// length and vocabulary (every token's text, in id order). Stable while the router serves the
// same model with the same build version; changes when either does (OpenAI's meaning: the
// backend configuration that produced the response).
std::string SystemFingerprint(absl::string_view tandem_version, absl::string_view model,
                              int64_t context_length, const std::vector<std::string>& vocabulary);

// The HTTP status for a request that ended with `code`: 400 invalid request, 404 not found, 429
// no capacity (RESOURCE_EXHAUSTED), 503 unavailable, 504 deadline, 499 cancelled, 500 a bug.
int HttpStatusFor(absl::StatusCode code);
// {"error": {"message", "type", "param", "code"}}: `param` from the kOpenAiParamPayload payload
// (else null), `code` the HTTP status, HttpStatusFor(status.code()).
std::string ErrorBody(const absl::Status& status);
// The same object for an HTTP status given directly (401, 404, 405, 413 of the server).
std::string ErrorBody(int http_status, absl::string_view message);
// "invalid_request_error" (400, 405, 413), "authentication_error" (401), "permission_error"
// (403), "not_found_error" (404), "rate_limit_error" (429), "cancelled_error" (499),
// "not_implemented_error" (501), "service_unavailable_error" (503), "timeout_error" (504),
// "internal_error" (anything else).
const char* ErrorType(int http_status);

}  // namespace tandem
