// Parsing of OpenAI-style request bodies (POST /v1/chat/completions and /v1/completions, as vLLM
// implements them) into what the router routes. Pure; thread-safe.
//
// No field is silently ignored (openai_fields.h): every field the endpoints know is honoured or
// refused with INVALID_ARGUMENT naming it; unknown fields are ignored, as vLLM does, and listed
// in OpenAiRequest::unknown_fields for the caller to log. docs/router.md's "Request fields" table
// says what each field does.
//
// Honoured: model, messages (role and content: a string, null, or text parts) / prompt (a
// string, a token-id array, or a one-element array of either), max_tokens /
// max_completion_tokens (the latter wins), temperature, top_p, top_k (-1 = disabled, as vLLM),
// seed, stop (string or strings), ignore_eos, min_p, repetition_penalty, presence_penalty,
// frequency_penalty, logit_bias, min_tokens, stop_token_ids, logprobs, top_logprobs
// (openai_sampling.h), n (openai_choices.h), stream, stream_options.include_usage,
// add_special_tokens, include_stop_str_in_output, truncate_prompt_tokens, request_id, tandem
// (openai_tandem.h); response_format and vLLM's guided_json / guided_regex / guided_choice /
// guided_grammar (openai_structured.h: the GBNF in sampling.grammar); tools, tool_choice and
// messages' tool_calls / tool_call_id (openai_tools.h). Refused when they ask for anything: echo,
// best_of other than n.
//
// Errors are INVALID_ARGUMENT naming the field; the field is also attached as the status payload
// kOpenAiParamPayload (the OpenAI error object's `param`). Range checks the router's gRPC path
// already makes (max_tokens >= 1, temperature >= 0, top_p, context length, ...) are left to it, so
// both APIs answer with the same messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/sampling.h"
#include "router/http/openai_tandem.h"
#include "router/http/openai_tools.h"
#include "router/request_validation.h"

namespace tandem {

enum class OpenAiEndpoint { kChatCompletions, kCompletions };

inline constexpr char kOpenAiParamPayload[] = "type.tandem/openai.param";

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kChatCompletions;
  std::string model;   // empty = the router's model
  PromptInput prompt;  // kChat for chat completions; kText or kTokenIds for completions
  std::optional<int32_t> max_tokens;  // unset = up to the end of the context (vLLM's default)
  SamplingParams sampling;            // OpenAI defaults: temperature 1, top_p 1; top_k off
  std::optional<uint64_t> seed;       // unset = a random seed
  // Choices from one prefill (openai_choices.h), in [1, kMaxChoices]; choice i samples with
  // seed + i.
  int32_t n = 1;
  std::vector<std::string> stop;  // non-empty stop strings
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // further ids that end generation (vLLM)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Prepend BOS when the model asks for it (vLLM's add_special_tokens); unset = yes.
  std::optional<bool> add_special_tokens;
  bool include_stop_str_in_output = false;  // the matched stop string ends the text
  // Keep only the prompt's last k tokens (k >= 1); -1 = the model's context length. Unset: all.
  std::optional<int32_t> truncate_prompt_tokens;
  std::optional<std::string> request_id;  // the body's request_id (vLLM)
  TandemRequestOptions tandem;            // the body's `tandem` object (openai_tandem.h)
  // Chat: `tools` and `tool_choice` (openai_tools.h); nullopt when no tools are given.
  std::optional<OpenAiTools> tools;
  // Chat: the format tool calls are shown and parsed in (set by PrepareOpenAiRequest: the
  // template's own when it renders tools, else Hermes; openai_tools.h).
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  // Chat: each message's `tool_calls` (the OpenAI array), null where it has none.
  std::vector<nlohmann::json> message_tool_calls;
  // Top-level keys (and "messages[].KEY", "stream_options.KEY") this endpoint does not know:
  // ignored, for the caller to log.
  std::vector<std::string> unknown_fields;
};

[[nodiscard]] absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint,
                                                               absl::string_view body);

// INVALID_ARGUMENT `message` carrying `param` as kOpenAiParamPayload.
[[nodiscard]] absl::Status OpenAiInvalidParam(absl::string_view param, absl::string_view message);

}  // namespace tandem
