#include "model/chat_template/chat_formatter.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "model/chat_template/json_value.h"

namespace tandem {
namespace {

// An assistant turn's OpenAI `tool_calls` as the template sees them: each `function.arguments`
// that is JSON text parsed into its value (vLLM does this for every template; transformers'
// templates index the arguments as a dict), other fields as given.
absl::StatusOr<jinja::Value> ToolCallsValue(absl::string_view tool_calls_json) {
  nlohmann::ordered_json calls = nlohmann::ordered_json::parse(tool_calls_json, nullptr, false);
  if (calls.is_discarded() || !calls.is_array()) {
    return absl::InvalidArgumentError("tool_calls: not a JSON array");
  }
  for (nlohmann::ordered_json& call : calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    nlohmann::ordered_json& function = call["function"];
    if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
    nlohmann::ordered_json args =
        nlohmann::ordered_json::parse(function["arguments"].get<std::string>(), nullptr, false);
    if (!args.is_discarded()) function["arguments"] = std::move(args);
  }
  return jinja::FromJson(calls);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ChatFormatter>> ChatFormatter::Create(
    absl::string_view chat_template, absl::string_view origin, std::string bos_token,
    std::string eos_token) {
  auto f = std::shared_ptr<ChatFormatter>(new ChatFormatter());
  f->origin_ = std::string(origin);
  f->bos_token_ = std::move(bos_token);
  f->eos_token_ = std::move(eos_token);
  if (!chat_template.empty()) {
    absl::StatusOr<std::shared_ptr<const ChatTemplate>> t = ChatTemplate::Parse(chat_template);
    if (!t.ok()) {
      return absl::Status(t.status().code(), absl::StrCat(origin, ": ", t.status().message(),
                                                          " (--chat_template FILE overrides it)"));
    }
    f->template_ = *std::move(t);
    f->source_ = std::string(chat_template);
  }
  return std::shared_ptr<const ChatFormatter>(std::move(f));
}

absl::StatusOr<std::string> ChatFormatter::Format(absl::Span<const ChatMessage> messages,
                                                  bool add_generation_prompt,
                                                  absl::string_view tools_json) const {
  if (template_ == nullptr) return FormatChatMl(messages, add_generation_prompt);
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::Map message;
    message.Set("role", jinja::Value(m.role));
    message.Set("content", jinja::Value(m.content));
    if (!m.tool_calls_json.empty()) {
      absl::StatusOr<jinja::Value> calls = ToolCallsValue(m.tool_calls_json);
      if (!calls.ok()) return calls.status();
      message.Set("tool_calls", *std::move(calls));
    }
    if (!m.tool_call_id.empty()) message.Set("tool_call_id", jinja::Value(m.tool_call_id));
    list.push_back(jinja::Value::Dict(std::move(message)));
  }
  jinja::Map vars;
  vars.Set("messages", jinja::Value::Seq(std::move(list)));
  if (tools_json.empty()) {
    vars.Set("tools", jinja::Value::None());
  } else {
    const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
    if (tools.is_discarded() || !tools.is_array()) {
      return absl::InvalidArgumentError("tools: not a JSON array");
    }
    vars.Set("tools", jinja::FromJson(tools));
  }
  vars.Set("documents", jinja::Value::None());
  vars.Set("add_generation_prompt", jinja::Value(add_generation_prompt));
  // transformers passes only the special tokens the tokenizer has (Qwen has no BOS).
  if (!bos_token_.empty()) vars.Set("bos_token", jinja::Value(bos_token_));
  if (!eos_token_.empty()) vars.Set("eos_token", jinja::Value(eos_token_));
  return template_->Render(vars);
}

absl::StatusOr<std::string> CutAfterFinalMessage(absl::string_view rendered,
                                                 absl::string_view final_content) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(final_content);
  const size_t at = rendered.rfind(stripped);
  if (at == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message: the final message does not appear in the conversation as the "
        "chat template renders it (the template drops part of it)");
  }
  const absl::string_view lead_stripped = absl::StripLeadingAsciiWhitespace(final_content);
  // The template kept the message's trailing whitespace (or it has none): keep it too.
  if (rendered.substr(at, lead_stripped.size()) == final_content) {
    return std::string(rendered.substr(0, at + lead_stripped.size()));
  }
  return std::string(rendered.substr(0, at + stripped.size()));
}

absl::StatusOr<std::string> ChatFormatter::FormatContinuingLast(
    absl::Span<const ChatMessage> messages, absl::string_view tools_json) const {
  if (messages.empty()) {
    return absl::InvalidArgumentError("continue_final_message: the conversation has no messages");
  }
  absl::StatusOr<std::string> text = Format(messages, /*add_generation_prompt=*/false, tools_json);
  if (!text.ok()) return text.status();
  return CutAfterFinalMessage(*text, messages.back().content);
}

std::string ChatFormatter::Describe() const {
  if (template_ == nullptr) {
    return "chat: the model has no chat template; chat requests are rendered as ChatML "
           "(fallback; --chat_template FILE gives one)";
  }
  return absl::StrCat("chat: requests are rendered with the chat template from ", origin_);
}

}  // namespace tandem
