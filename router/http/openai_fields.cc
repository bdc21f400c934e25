#include "router/http/openai_fields.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

enum Endpoints : unsigned { kChat = 1, kCmpl = 2, kBoth = kChat | kCmpl };

// What a known field's value may be for Tandem to accept it.
using Accepts = bool (*)(const Json& value);

// Absent-equivalent: null, false, 0, "", [], {}.
bool Empty(const Json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v.get<double>() == 0;
  if (v.is_string() || v.is_array() || v.is_object()) return v.empty();
  return false;
}
bool NullOrTrue(const Json& v) { return v.is_null() || (v.is_boolean() && v.get<bool>()); }
bool NullOrOne(const Json& v) { return v.is_null() || (v.is_number() && v.get<double>() == 1); }
bool Anything(const Json&) { return true; }
bool NoneOrAuto(const Json& v) { return v.is_null() || v == "none" || v == "auto"; }
bool TextOnly(const Json& v) { return v.is_null() || v == Json::array({"text"}); }
bool DefaultTier(const Json& v) { return v.is_null() || v == "auto" || v == "default"; }
bool MediumVerbosity(const Json& v) { return v.is_null() || v == "medium"; }

struct Field {
  absl::string_view name;
  unsigned endpoints;
  // nullptr: parsed by ParseOpenAiRequest (honoured, or refused there with its own message).
  Accepts accepts;
  absl::string_view refusal;  // why another value is refused
};

constexpr char kTools[] = "the legacy functions API is not supported (use tools)";
constexpr char kBeam[] = "beam search is not implemented";

// Every field the two endpoints know; docs/router.md's table lists the same.
constexpr Field kFields[] = {
    // Honoured: ParseOpenAiRequest parses these.
    {"model", kBoth, nullptr, ""},
    {"messages", kChat, nullptr, ""},
    {"prompt", kCmpl, nullptr, ""},
    {"max_tokens", kBoth, nullptr, ""},
    {"max_completion_tokens", kChat, nullptr, ""},
    {"temperature", kBoth, nullptr, ""},
    {"top_p", kBoth, nullptr, ""},
    {"top_k", kBoth, nullptr, ""},
    {"seed", kBoth, nullptr, ""},
    {"stop", kBoth, nullptr, ""},
    {"ignore_eos", kBoth, nullptr, ""},
    {"n", kBoth, nullptr, ""},
    {"stream", kBoth, nullptr, ""},
    {"stream_options", kBoth, nullptr, ""},
    {"add_special_tokens", kBoth, nullptr, ""},
    {"include_stop_str_in_output", kBoth, nullptr, ""},
    {"truncate_prompt_tokens", kBoth, nullptr, ""},
    {"request_id", kBoth, nullptr, ""},
    {"tandem", kBoth, nullptr, ""},
    {"echo", kBoth, nullptr, ""},
    {"best_of", kBoth, nullptr, ""},
    {"add_generation_prompt", kChat, nullptr, ""},
    {"continue_final_message", kChat, nullptr, ""},
    // The sampler's fields (parsed, or refused until implemented, by ParseOpenAiRequest).
    {"min_p", kBoth, nullptr, ""},
    {"repetition_penalty", kBoth, nullptr, ""},
    {"presence_penalty", kBoth, nullptr, ""},
    {"frequency_penalty", kBoth, nullptr, ""},
    {"logit_bias", kBoth, nullptr, ""},
    {"min_tokens", kBoth, nullptr, ""},
    {"stop_token_ids", kBoth, nullptr, ""},
    {"logprobs", kBoth, nullptr, ""},
    {"top_logprobs", kChat, nullptr, ""},
    // Accepted whatever the value: nothing in them changes what is generated.
    {"user", kBoth, Anything, ""},
    {"metadata", kChat, Anything, ""},
    {"safety_identifier", kChat, Anything, ""},
    {"prompt_cache_key", kChat, Anything, ""},
    {"parallel_tool_calls", kChat, Anything, ""},
    {"spaces_between_special_tokens", kBoth, Anything, ""},
    // Accepted at their default only.
    // Structured output (openai_structured.h).
    {"response_format", kBoth, nullptr, ""},
    {"guided_json", kBoth, nullptr, ""},
    {"guided_regex", kBoth, nullptr, ""},
    {"guided_choice", kBoth, nullptr, ""},
    {"guided_grammar", kBoth, nullptr, ""},
    {"guided_decoding_backend", kBoth, Anything, ""},  // one engine: Tandem's own
    {"guided_whitespace_pattern", kBoth, Empty,
     "the JSON whitespace policy is fixed (docs/structured_output.md)"},
    {"structural_tag", kBoth, Empty, "structural tags are not implemented"},
    // Tool calling (openai_tools.h); the legacy functions API is not.
    {"tools", kChat, nullptr, ""},
    {"tool_choice", kChat, nullptr, ""},
    {"functions", kChat, Empty, kTools},
    {"function_call", kChat, NoneOrAuto, "only \"none\" or \"auto\": use tools and tool_choice"},
    {"use_beam_search", kBoth, Empty, kBeam},
    {"length_penalty", kBoth, NullOrOne, "must be 1: beam search is not implemented"},
    {"allowed_token_ids", kBoth, Empty, "restricting the vocabulary is not implemented"},
    {"bad_words", kBoth, Empty, "banning words is not implemented"},
    {"logits_processors", kBoth, Empty, "custom logits processors are not implemented"},
    {"prompt_logprobs", kBoth, Empty, "prompt log probabilities are not implemented"},
    {"return_tokens_as_token_ids", kBoth, Empty,
     "logprobs name tokens by their text, not as 'token_id:N'"},
    {"skip_special_tokens", kBoth, NullOrTrue,
     "must be true: the router never renders special tokens"},
    {"priority", kBoth, Empty, "must be 0: priority scheduling is not implemented"},
    {"cache_salt", kBoth, Empty, "per-request prefix-cache salts are not implemented"},
    {"kv_transfer_params", kBoth, Empty, "Tandem transfers KV itself"},
    {"vllm_xargs", kBoth, Empty, "vLLM's extension arguments are not implemented"},
    {"suffix", kCmpl, Empty, "inserting text after the completion is not implemented"},
    {"documents", kChat, Empty, "documents for the chat template are not implemented"},
    {"chat_template", kChat, Empty, "a request's own chat template is not supported"},
    {"chat_template_kwargs", kChat, Empty, "chat template arguments are not supported"},
    {"mm_processor_kwargs", kChat, Empty, "multi-modal input is not implemented"},
    {"audio", kChat, Empty, "audio output is not implemented"},
    {"modalities", kChat, TextOnly, "only [\"text\"]"},
    {"prediction", kChat, Empty, "predicted outputs are not implemented"},
    {"reasoning_effort", kChat, Empty, "the served model does not reason"},
    {"web_search_options", kChat, Empty, "web search is not implemented"},
    {"service_tier", kChat, DefaultTier, "only \"auto\" or \"default\""},
    {"store", kChat, Empty, "completions are not stored"},
    {"verbosity", kChat, MediumVerbosity, "only \"medium\""},
};

const Field* Find(OpenAiEndpoint endpoint, absl::string_view name) {
  const unsigned want = endpoint == OpenAiEndpoint::kChatCompletions ? kChat : kCmpl;
  for (const Field& f : kFields) {
    if (f.name == name && (f.endpoints & want) != 0) return &f;
  }
  return nullptr;
}

}  // namespace

absl::Status RefuseUnsupportedFields(OpenAiEndpoint endpoint, const Json& body) {
  for (const auto& [name, value] : body.items()) {
    const Field* f = Find(endpoint, name);
    if (f == nullptr || f->accepts == nullptr || f->accepts(value)) continue;
    return OpenAiInvalidParam(name, absl::StrCat("'", name, "' is not supported: ", f->refusal));
  }
  return absl::OkStatus();
}

std::vector<std::string> UnknownFields(OpenAiEndpoint endpoint, const Json& body) {
  std::vector<std::string> unknown;
  for (const auto& [name, value] : body.items()) {
    if (Find(endpoint, name) == nullptr) unknown.push_back(name);
  }
  return unknown;
}

bool IsKnownField(OpenAiEndpoint endpoint, const std::string& field) {
  return Find(endpoint, field) != nullptr;
}

std::vector<std::string> KnownFields(OpenAiEndpoint endpoint) {
  const unsigned want = endpoint == OpenAiEndpoint::kChatCompletions ? kChat : kCmpl;
  std::vector<std::string> names;
  for (const Field& f : kFields) {
    if ((f.endpoints & want) != 0) names.emplace_back(f.name);
  }
  return names;
}

}  // namespace tandem
