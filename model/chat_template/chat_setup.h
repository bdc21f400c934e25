// Where a model's chat template comes from, and the ChatFormatter the router and tandem-generate
// build from it (chat_formatter.h):
//   --chat_template FILE   (when given) overrides the model's template
//   GGUF                   tokenizer.chat_template
//   HF checkpoint          chat_template.jinja, else tokenizer_config.json chat_template (a
//                          string, or the "default" entry of a list of named templates)
//   none of these          ChatML, the documented fallback (ChatFormatter::Describe says so)
// The template's bos_token / eos_token are the texts of the tokenizer's BOS / EOS tokens.
//
// Thread-safe (reads files; no shared state).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat_template/chat_formatter.h"
#include "model/format/gguf_file.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

struct ChatTemplateSource {
  std::string text;    // empty: the model has none
  std::string origin;  // "GGUF tokenizer.chat_template", "<dir>/chat_template.jinja", ...
};

[[nodiscard]] absl::StatusOr<ChatTemplateSource> ChatTemplateFromGguf(const GgufFile& file);
[[nodiscard]] absl::StatusOr<ChatTemplateSource> ChatTemplateFromHfDirectory(
    const std::string& dir);
// The --chat_template FILE: NotFound/InvalidArgument when it cannot be read or is empty.
[[nodiscard]] absl::StatusOr<ChatTemplateSource> ChatTemplateFromFile(const std::string& path);

// The formatter for `source` with the tokenizer's BOS/EOS texts. Errors: ChatFormatter::Create's
// (an unsupported template is refused, naming the construct and the source).
[[nodiscard]] absl::StatusOr<std::shared_ptr<const ChatFormatter>> MakeChatFormatter(
    const ChatTemplateSource& source, const Tokenizer* tokenizer);

// For a model path as LoadModel takes it (a GGUF file or a HF directory): the template of
// `override_file` when non-empty, else the model's own.
[[nodiscard]] absl::StatusOr<std::shared_ptr<const ChatFormatter>> LoadChatFormatter(
    const std::string& model_path, const std::string& override_file, const Tokenizer* tokenizer);

}  // namespace tandem
