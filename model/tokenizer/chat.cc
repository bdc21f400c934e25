#include "model/tokenizer/chat.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tandem {

std::string DefaultSystemPrompt(absl::string_view chat_template) {
  // Only templates that insert the message conditionally have a default; one that merely
  // formats a given system message does not.
  if (!absl::StrContains(chat_template, "!= 'system'") &&
      !absl::StrContains(chat_template, "!= \"system\"")) {
    return "";
  }
  // The literal is written inside a Jinja string, with the newline either real or escaped.
  for (const absl::string_view head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    const size_t begin = chat_template.find(head);
    if (begin == absl::string_view::npos) continue;
    const size_t start = begin + head.size();
    const size_t end = chat_template.find("<|im_end|>", start);
    if (end == absl::string_view::npos) return "";
    return absl::StrReplaceAll(chat_template.substr(start, end - start), {{"\\n", "\n"}});
  }
  return "";
}

std::string FormatChatMl(absl::Span<const ChatMessage> messages, bool add_generation_prompt,
                         absl::string_view default_system) {
  std::string out;
  if (!default_system.empty() && (messages.empty() || messages.front().role != "system")) {
    absl::StrAppend(&out, "<|im_start|>system\n", default_system, "<|im_end|>\n");
  }
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

}  // namespace tandem
