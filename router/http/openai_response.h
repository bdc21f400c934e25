// OpenAI response bodies (as vLLM sends them) and server-sent-event framing for the router's HTTP
// API: whole chat / text completions, streaming chunks, the usage chunk, the model list, and
// error objects with the HTTP status a client expects for each status code. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

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
};

struct CompletionUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

std::string CompletionId(OpenAiEndpoint endpoint, absl::string_view request_id);

// A whole (stream: false) response: chat.completion or text_completion.
std::string CompletionBody(const CompletionMeta& meta, absl::string_view text,
                           absl::string_view finish_reason, const CompletionUsage& usage);

// One streaming chunk. Chat: `role` adds "role": "assistant" to the delta (the first chunk);
// `finish_reason` empty = null (a content chunk); with `usage_field` the chunk carries
// "usage": null (stream_options.include_usage asks for it on every chunk but the last).
std::string ChunkBody(const CompletionMeta& meta, absl::string_view text, bool role,
                      absl::string_view finish_reason, bool usage_field);
// The last chunk with stream_options.include_usage: no choices, the usage.
std::string UsageChunkBody(const CompletionMeta& meta, const CompletionUsage& usage);

// "data: <json>\n\n" and the stream's end marker.
std::string SseEvent(absl::string_view json);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// GET /v1/models.
std::string ModelsBody(absl::string_view model, int64_t created);

// The HTTP status for a request that ended with `code`: 400 invalid request, 404 not found, 429
// no capacity (RESOURCE_EXHAUSTED), 503 unavailable, 504 deadline, 499 cancelled, 500 a bug.
int HttpStatusFor(absl::StatusCode code);
// {"error": {"message", "type", "param", "code"}}: `param` from the kOpenAiParamPayload payload
// (else null), `code` the HTTP status.
std::string ErrorBody(const absl::Status& status);

}  // namespace tandem
