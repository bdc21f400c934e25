#include "router/http/openai_request.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/request_checks.h"
#include "router/http/openai_fields.h"
#include "router/http/openai_sampling.h"
#include "router/http/openai_structured.h"
#include "router/http/openai_tools.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

absl::StatusOr<std::optional<int64_t>> OptionalInt(const Json& body, const char* field) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_unsigned()) {
    return OpenAiInvalidParam(field, absl::StrCat("'", field, "' is out of range"));
  }
  return OpenAiInvalidParam(field, absl::StrCat("'", field, "' must be an integer"));
}

absl::StatusOr<std::optional<double>> OptionalNumber(const Json& body, const char* field) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) {
    return OpenAiInvalidParam(field, absl::StrCat("'", field, "' must be a number"));
  }
  return it->get<double>();
}

absl::StatusOr<bool> OptionalBool(const Json& body, const char* field) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    return OpenAiInvalidParam(field, absl::StrCat("'", field, "' must be a boolean"));
  }
  return it->get<bool>();
}

int32_t ClampToInt32(int64_t v) {
  if (v > std::numeric_limits<int32_t>::max()) return std::numeric_limits<int32_t>::max();
  if (v < std::numeric_limits<int32_t>::min()) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(v);
}

// A message's content: a string, null (an assistant turn with no text), or text parts.
absl::StatusOr<std::string> MessageContent(const Json& content, size_t index) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  const std::string field = absl::StrCat("messages[", index, "].content");
  if (!content.is_array()) {
    return OpenAiInvalidParam(field, absl::StrCat("'", field, "' must be a string or an array"));
  }
  std::string text;
  for (const Json& part : content) {
    const auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || *type != "text") {
      return OpenAiInvalidParam(
          field, absl::StrCat("'", field, "' parts must be {\"type\": \"text\", \"text\": ...}"));
    }
    const auto part_text = part.find("text");
    if (part_text == part.end() || !part_text->is_string()) {
      return OpenAiInvalidParam(field, absl::StrCat("'", field, "' text part has no 'text'"));
    }
    text += part_text->get<std::string>();
  }
  return text;
}

// A message's keys besides role and content: the ones that would change the prompt are refused
// (the chat rendering has no place for them), others are unknown.
absl::Status CheckMessageKeys(const Json& m, size_t index, std::vector<std::string>& unknown) {
  for (const auto& [key, value] : m.items()) {
    if (key == "role" || key == "content") continue;
    // Tool calls of an assistant turn and the id a tool result answers (openai_tools.h).
    if (key == "tool_calls" && (value.is_array() || value.is_null())) continue;
    if (key == "tool_call_id" && (value.is_string() || value.is_null())) continue;
    if (key == "name" || key == "tool_calls" || key == "tool_call_id" || key == "function_call") {
      if (value.is_null() || (value.is_array() && value.empty())) continue;
      const std::string field = absl::StrCat("messages[", index, "].", key);
      return OpenAiInvalidParam(
          field, absl::StrCat("'", field, "' is not supported: ",
                              key == "name" ? "the chat rendering has no participant names"
                              : key == "function_call" ? "the legacy function_call is not "
                                                         "supported (use tool_calls)"
                                                       : "must be an array (tool_calls) or a "
                                                         "string (tool_call_id)"));
    }
    unknown.push_back(absl::StrCat("messages[].", key));
  }
  return absl::OkStatus();
}

absl::Status ParseMessages(const Json& body, PromptInput& prompt, std::vector<std::string>& unknown,
                           std::vector<Json>& tool_calls) {
  const auto it = body.find("messages");
  if (it == body.end() || !it->is_array()) {
    return OpenAiInvalidParam("messages", "'messages' must be an array of messages");
  }
  prompt.kind = PromptInput::Kind::kChat;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const auto role = m.is_object() ? m.find("role") : m.end();
    if (!m.is_object() || role == m.end() || !role->is_string()) {
      const std::string field = absl::StrCat("messages[", i, "].role");
      return OpenAiInvalidParam(field, absl::StrCat("'", field, "' must be a string"));
    }
    if (absl::Status s = CheckMessageKeys(m, i, unknown); !s.ok()) return s;
    const auto content = m.find("content");
    absl::StatusOr<std::string> text =
        MessageContent(content == m.end() ? Json(nullptr) : *content, i);
    if (!text.ok()) return text.status();
    prompt.chat.push_back({role->get<std::string>(), *std::move(text)});
    if (const auto id = m.find("tool_call_id"); id != m.end() && id->is_string()) {
      prompt.chat.back().tool_call_id = id->get<std::string>();
    }
    const auto calls = m.find("tool_calls");
    tool_calls.push_back(calls != m.end() && calls->is_array() ? *calls : Json());
  }
  return absl::OkStatus();
}

// add_generation_prompt (default true) and continue_final_message (default false); vLLM refuses
// both true.
absl::Status ParseGenerationPrompt(const Json& body, PromptInput& prompt) {
  if (const auto it = body.find("add_generation_prompt"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return OpenAiInvalidParam("add_generation_prompt",
                                "'add_generation_prompt' must be a boolean");
    }
    prompt.add_generation_prompt = it->get<bool>();
  }
  absl::StatusOr<bool> cont = OptionalBool(body, "continue_final_message");
  if (!cont.ok()) return cont.status();
  prompt.continue_final_message = *cont;
  if (prompt.continue_final_message && prompt.add_generation_prompt) {
    return OpenAiInvalidParam("continue_final_message",
                              "'continue_final_message' and 'add_generation_prompt' cannot both "
                              "be true (set add_generation_prompt to false)");
  }
  return absl::OkStatus();
}

absl::Status TokenIds(const Json& array, PromptInput& prompt) {
  prompt.kind = PromptInput::Kind::kTokenIds;
  for (const Json& id : array) {
    if (!id.is_number_integer()) {
      return OpenAiInvalidParam("prompt", "'prompt' token ids must be integers");
    }
    prompt.token_ids.push_back(ClampToInt32(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const Json& body, PromptInput& prompt) {
  const auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    return OpenAiInvalidParam("prompt", "'prompt' is required");
  }
  if (it->is_string()) {
    prompt.kind = PromptInput::Kind::kText;
    prompt.text = it->get<std::string>();
    return absl::OkStatus();
  }
  if (!it->is_array()) {
    return OpenAiInvalidParam("prompt", "'prompt' must be a string or an array of token ids");
  }
  if (!it->empty() && ((*it)[0].is_string() || (*it)[0].is_array())) {
    // A batch of prompts: only a batch of one is served.
    if (it->size() != 1) {
      return OpenAiInvalidParam("prompt", "only one prompt per request is supported");
    }
    const Json& only = (*it)[0];
    if (only.is_string()) {
      prompt.kind = PromptInput::Kind::kText;
      prompt.text = only.get<std::string>();
      return absl::OkStatus();
    }
    return TokenIds(only, prompt);
  }
  return TokenIds(*it, prompt);
}

absl::Status ParseStop(const Json& body, std::vector<std::string>& stop) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) stop.push_back(it->get<std::string>());
    return absl::OkStatus();
  }
  if (!it->is_array()) {
    return OpenAiInvalidParam("stop", "'stop' must be a string or an array of strings");
  }
  for (const Json& s : *it) {
    if (!s.is_string()) return OpenAiInvalidParam("stop", "'stop' must contain only strings");
    if (!s.get<std::string>().empty()) stop.push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

// Fields Tandem does not implement that would change the response: rejected when they ask for
// anything (a value other than null and the field's neutral value).
absl::Status RejectUnsupported(const Json& body) {
  for (const char* field : {"echo"}) {
    const auto it = body.find(field);
    if (it == body.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) continue;
    return OpenAiInvalidParam(field, absl::StrCat("'", field, "' is not supported"));
  }
  // best_of = n returns every sequence generated: honoured as n; more would need ranking.
  const auto best_of = body.find("best_of");
  const auto n = body.find("n");
  const double choices = n != body.end() && n->is_number() ? n->get<double>() : 1;
  if (best_of != body.end() && best_of->is_number() && best_of->get<double>() != choices) {
    return OpenAiInvalidParam("best_of", "'best_of' is not supported unless it equals n");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status OpenAiInvalidParam(absl::string_view param, absl::string_view message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kOpenAiParamPayload, absl::Cord(param));
  return s;
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body) {
  const Json json = Json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError("request body is not valid JSON");
  if (!json.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  OpenAiRequest r;
  r.endpoint = endpoint;
  if (const auto model = json.find("model"); model != json.end() && !model->is_null()) {
    if (!model->is_string()) return OpenAiInvalidParam("model", "'model' must be a string");
    r.model = model->get<std::string>();
  }
  if (absl::Status s = RefuseUnsupportedFields(endpoint, json); !s.ok()) return s;
  if (absl::Status s = RejectUnsupported(json); !s.ok()) return s;
  r.unknown_fields = UnknownFields(endpoint, json);
  absl::StatusOr<std::optional<int64_t>> n = OptionalInt(json, "n");
  if (!n.ok()) return n.status();
  if (n->has_value()) {
    if (**n < 1 || **n > kMaxChoices) {
      return OpenAiInvalidParam(
          "n", absl::StrCat("'n' must be in [1, ", kMaxChoices, "] (got ", **n, ")"));
    }
    r.n = static_cast<int32_t>(**n);
  }
  if (absl::Status s = endpoint == OpenAiEndpoint::kChatCompletions
                           ? ParseMessages(json, r.prompt, r.unknown_fields, r.message_tool_calls)
                           : ParsePrompt(json, r.prompt);
      !s.ok()) {
    return s;
  }
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    if (absl::Status s = ParseGenerationPrompt(json, r.prompt); !s.ok()) return s;
    // Tool calls for a template that renders them, in the body's key order (a template that
    // writes them with tojson shows them as the client sent them).
    if (std::any_of(r.message_tool_calls.begin(), r.message_tool_calls.end(),
                    [](const Json& c) { return c.is_array() && !c.empty(); })) {
      const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, false);
      for (size_t i = 0; i < r.prompt.chat.size() && !ordered.is_discarded(); ++i) {
        if (r.message_tool_calls[i].is_array() && !r.message_tool_calls[i].empty()) {
          r.prompt.chat[i].tool_calls_json = ordered["messages"][i]["tool_calls"].dump();
        }
      }
    }
  }
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    absl::StatusOr<std::optional<int64_t>> v = OptionalInt(json, field);
    if (!v.ok()) return v.status();
    if (v->has_value()) r.max_tokens = ClampToInt32(**v);
  }
  absl::StatusOr<std::optional<double>> temperature = OptionalNumber(json, "temperature");
  if (!temperature.ok()) return temperature.status();
  r.sampling.temperature = static_cast<float>(temperature->value_or(1.0));
  absl::StatusOr<std::optional<double>> top_p = OptionalNumber(json, "top_p");
  if (!top_p.ok()) return top_p.status();
  r.sampling.top_p = static_cast<float>(top_p->value_or(1.0));
  absl::StatusOr<std::optional<int64_t>> top_k = OptionalInt(json, "top_k");
  if (!top_k.ok()) return top_k.status();
  r.sampling.top_k = top_k->has_value() && **top_k != -1 ? ClampToInt32(**top_k) : 0;
  absl::StatusOr<std::optional<int64_t>> seed = OptionalInt(json, "seed");
  if (!seed.ok()) return seed.status();
  if (seed->has_value()) r.seed = static_cast<uint64_t>(**seed);
  if (absl::Status s = ParseStop(json, r.stop); !s.ok()) return s;
  if (absl::Status s = ParseOpenAiSamplerFields(json, r); !s.ok()) return s;
  if (absl::Status s = ParseOpenAiLogprobs(json, r); !s.ok()) return s;
  absl::StatusOr<std::optional<OpenAiStructuredOutput>> structured =
      ParseOpenAiStructuredOutput(json, body);
  if (!structured.ok()) return structured.status();
  if (structured->has_value()) r.sampling.grammar = (*structured)->grammar;
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    absl::StatusOr<std::optional<OpenAiTools>> tools = ParseOpenAiTools(json, body);
    if (!tools.ok()) return tools.status();
    r.tools = *std::move(tools);
    const bool forced = r.tools.has_value() && (r.tools->choice == OpenAiTools::Choice::kRequired ||
                                                r.tools->choice == OpenAiTools::Choice::kNamed);
    if (forced && structured->has_value()) {
      return OpenAiInvalidParam("tool_choice",
                                absl::StrCat("'tool_choice' forces a tool call, which '",
                                             (*structured)->field, "' also constrains"));
    }
  }
  absl::StatusOr<bool> ignore_eos = OptionalBool(json, "ignore_eos");
  if (!ignore_eos.ok()) return ignore_eos.status();
  r.ignore_eos = *ignore_eos;
  absl::StatusOr<bool> stream = OptionalBool(json, "stream");
  if (!stream.ok()) return stream.status();
  r.stream = *stream;
  if (const auto opts = json.find("stream_options"); opts != json.end() && !opts->is_null()) {
    if (!opts->is_object()) {
      return OpenAiInvalidParam("stream_options", "'stream_options' must be an object");
    }
    absl::StatusOr<bool> include_usage = OptionalBool(*opts, "include_usage");
    if (!include_usage.ok()) {
      return OpenAiInvalidParam("stream_options.include_usage",
                                "'stream_options.include_usage' must be a boolean");
    }
    r.include_usage = *include_usage;
    for (const auto& [key, value] : opts->items()) {
      if (key == "include_usage" || key == "include_obfuscation") continue;
      if (key == "continuous_usage_stats") {
        if (value.is_null() || value == false) continue;
        return OpenAiInvalidParam("stream_options.continuous_usage_stats",
                                  "'stream_options.continuous_usage_stats' is not supported");
      }
      r.unknown_fields.push_back(absl::StrCat("stream_options.", key));
    }
  }
  if (const auto it = json.find("add_special_tokens"); it != json.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return OpenAiInvalidParam("add_special_tokens", "'add_special_tokens' must be a boolean");
    }
    r.add_special_tokens = it->get<bool>();
  }
  absl::StatusOr<bool> include_stop = OptionalBool(json, "include_stop_str_in_output");
  if (!include_stop.ok()) return include_stop.status();
  r.include_stop_str_in_output = *include_stop;
  absl::StatusOr<std::optional<int64_t>> truncate = OptionalInt(json, "truncate_prompt_tokens");
  if (!truncate.ok()) return truncate.status();
  if (truncate->has_value()) {
    if (**truncate < -1 || **truncate == 0) {
      return OpenAiInvalidParam("truncate_prompt_tokens",
                                absl::StrCat("'truncate_prompt_tokens' must be >= 1, or -1 for the "
                                             "context length (got ",
                                             **truncate, ")"));
    }
    r.truncate_prompt_tokens = ClampToInt32(**truncate);
  }
  if (const auto it = json.find("request_id"); it != json.end() && !it->is_null()) {
    if (!it->is_string()) return OpenAiInvalidParam("request_id", "'request_id' must be a string");
    r.request_id = it->get<std::string>();
  }
  absl::StatusOr<TandemRequestOptions> tandem = ParseTandemOptions(json);
  if (!tandem.ok()) return tandem.status();
  r.tandem = *tandem;
  return r;
}

}  // namespace tandem
