// How a chat request becomes prompt text: the model's own chat template (GGUF
// tokenizer.chat_template, a HF checkpoint's chat_template.jinja or tokenizer_config.json
// chat_template, or a --chat_template FILE that overrides them), rendered as transformers'
// apply_chat_template renders it — messages, add_generation_prompt, bos_token and eos_token,
// tools (the OpenAI `tools` array, or None) and documents None; messages carry `tool_calls`
// (OpenAI objects, each `function.arguments` parsed into a dict when it is JSON text, as vLLM
// passes them) and `tool_call_id` where they have them; or, for a model without a template, ChatML
// (chat.h FormatChatMl), the documented fallback.
//
// The text holds special-token markers: encode it with parse_special. A template writes the
// BOS itself where the model wants one ({{ bos_token }}), so with a template the tokenizer must
// not add another (transformers tokenizes the rendered chat without special tokens): encode
// with with_bos = add_bos(). The ChatML fallback keeps the tokenizer's BOS rule.
//
// Immutable; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/chat_template/chat_template.h"
#include "model/tokenizer/chat.h"

namespace tandem {

// transformers' cut for continue_final_message: `rendered` up to the end of the last occurrence
// of `final_content` (its ASCII whitespace stripped, as transformers' str.strip(); the leading
// whitespace only, when the template kept the trailing one). INVALID_ARGUMENT naming
// continue_final_message when it does not occur. Pure.
absl::StatusOr<std::string> CutAfterFinalMessage(absl::string_view rendered,
                                                 absl::string_view final_content);

class ChatFormatter {
 public:
  // `chat_template` empty: the ChatML fallback. `origin` says where the template came from, for
  // Describe() ("GGUF tokenizer.chat_template", "--chat_template /path", ...). Errors: those of
  // ChatTemplate::Parse, prefixed with the origin.
  static absl::StatusOr<std::shared_ptr<const ChatFormatter>> Create(
      absl::string_view chat_template, absl::string_view origin, std::string bos_token,
      std::string eos_token);

  // Errors (template only): InvalidArgument with the template's message when it refuses the
  // conversation (raise_exception, e.g. "Conversation roles must alternate user/assistant/..."),
  // or naming the line and error when it fails on it.
  // `tools_json`: the OpenAI `tools` array as JSON text, the template's `tools`; empty: None.
  absl::StatusOr<std::string> Format(absl::Span<const ChatMessage> messages,
                                     bool add_generation_prompt = true,
                                     absl::string_view tools_json = "") const;
  // vLLM's continue_final_message: the conversation rendered without a generation prompt and cut
  // right after the last message's content, so the model continues that message (an assistant
  // prefix) instead of closing it. Errors: Format's, and INVALID_ARGUMENT naming
  // continue_final_message when the template drops part of the last message.
  absl::StatusOr<std::string> FormatContinuingLast(absl::Span<const ChatMessage> messages,
                                                   absl::string_view tools_json = "") const;

  bool uses_template() const { return template_ != nullptr; }
  // The template's source text; empty for the ChatML fallback.
  const std::string& template_source() const { return source_; }
  // Whether the tokenizer's own BOS rule applies to the formatted text (ChatML fallback only).
  bool add_bos() const { return template_ == nullptr; }
  // One line for the process log: "chat: the model's chat template (GGUF
  // tokenizer.chat_template)" or "chat: the model has no chat template; chat requests are
  // rendered as ChatML (fallback)".
  std::string Describe() const;

 private:
  ChatFormatter() = default;
  std::shared_ptr<const ChatTemplate> template_;  // null: ChatML
  std::string source_;
  std::string origin_;
  std::string bos_token_, eos_token_;
};

}  // namespace tandem
