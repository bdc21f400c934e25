// What the router knows about the model it serves: the tokenizer, the chat formatter (the
// model's chat template, or ChatML when it has none: model/chat_template/chat_setup.h) and the
// limits requests are validated against (name, vocabulary size, context length). Built from a
// GGUF file's metadata, or a HF checkpoint directory's config.json, tokenizer.json,
// tokenizer_config.json and chat_template.jinja: the router never loads weights.
//
// Immutable after construction; safe to share between request threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat_template/chat_formatter.h"
#include "model/format/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "router/request_validation.h"

namespace tandem {

class ServedModel {
 public:
  // A directory is a HF checkpoint (FromHfDirectory), anything else a GGUF file (FromGguf).
  // `chat_template_file` non-empty (--chat_template): its template replaces the model's.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ServedModel>> Load(
      const std::string& path, const std::string& name, const std::string& chat_template_file = "");
  // `name` empty = the file's general.name. Errors: those of TokenizerFromGguf and of
  // MakeChatFormatter (a chat template the renderer does not support is refused, naming the
  // construct); NotFound when <arch>.context_length is missing; InvalidArgument when no name is
  // given and general.name is absent, or the context length is not positive.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ServedModel>> FromGguf(
      const GgufFile& file, const std::string& name);
  // `name` empty = the directory's name. Limits: max_position_embeddings and the tokenizer's
  // vocabulary; the default system message from tokenizer_config.json's chat_template.
  // Errors: those of LoadModel; FailedPrecondition without tokenizer.json; InvalidArgument for a
  // context length that is not positive.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ServedModel>> FromHfDirectory(
      const std::string& dir, const std::string& name);

  ServedModel(const ServedModel&) = delete;
  ServedModel& operator=(const ServedModel&) = delete;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelLimits& limits() const { return limits_; }
  const ChatFormatter& chat() const { return *chat_; }

  // Token ids of a prompt that passed ValidatePromptInput: text with special tokens parsed (BOS
  // prepended when the model asks for it); chat rendered by chat() with the assistant turn
  // opened and special tokens parsed (BOS only as the template writes it; ChatML fallback: as
  // for text); token ids as given. Errors (chat only): the template's, InvalidArgument -- its own
  // message when it refuses the conversation (raise_exception), else naming the line.
  absl::StatusOr<std::vector<int32_t>> Tokenize(const PromptInput& prompt) const;

 private:
  ServedModel(std::shared_ptr<const Tokenizer> tokenizer, ModelLimits limits,
              std::shared_ptr<const ChatFormatter> chat)
      : tokenizer_(std::move(tokenizer)), limits_(std::move(limits)), chat_(std::move(chat)) {}

  std::shared_ptr<const Tokenizer> tokenizer_;
  ModelLimits limits_;
  std::shared_ptr<const ChatFormatter> chat_;
};

}  // namespace tandem
