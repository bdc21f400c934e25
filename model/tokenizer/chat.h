// Chat prompts in the ChatML format SmolLM2 (and Qwen, ...) are trained on:
//
//   <|im_start|>{role}\n{content}<|im_end|>\n   for each message, then
//   <|im_start|>assistant\n                      when a reply is to be generated.
//
// The result is text with special-token markers; encode it with parse_special = true.
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "absl/types/span.h"

namespace tandem {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

std::string FormatChatMl(absl::Span<const ChatMessage> messages, bool add_generation_prompt = true);

}  // namespace tandem
