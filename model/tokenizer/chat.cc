#include "model/tokenizer/chat.h"

#include "absl/strings/str_cat.h"

namespace tandem {

std::string FormatChatMl(absl::Span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

}  // namespace tandem
