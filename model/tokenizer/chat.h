// Chat prompts in the ChatML format SmolLM2 (and Qwen, ...) are trained on:
//
//   <|im_start|>{role}\n{content}<|im_end|>\n   for each message, then
//   <|im_start|>assistant\n                      when a reply is to be generated.
//
// SmolLM2's template also inserts a default system message when the conversation does not
// start with one; DefaultSystemPrompt finds that message in a model's chat template (GGUF
// tokenizer.chat_template or tokenizer_config.json chat_template) and FormatChatMl applies it.
//
// The result is text with special-token markers; encode it with parse_special = true.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
  // OpenAI tool calling, for a chat template that renders it (chat_formatter.h): an assistant
  // turn's `tool_calls` as a JSON array (OpenAI objects; empty: none), and the call a "tool"
  // message answers (empty: none). The ChatML fallback ignores both.
  std::string tool_calls_json;
  std::string tool_call_id;
};

// The literal default system message of a ChatML template that inserts one when
// messages[0] is not a system message (SmolLM2: "You are a helpful AI assistant named SmolLM,
// trained by Hugging Face"); empty when the template has none.
std::string DefaultSystemPrompt(absl::string_view chat_template);

// default_system is prepended as a system message when non-empty and the first message is not
// a system message.
std::string FormatChatMl(absl::Span<const ChatMessage> messages, bool add_generation_prompt = true,
                         absl::string_view default_system = "");

}  // namespace tandem
