// What the router knows about the model it serves: the tokenizer and the limits requests are
// validated against (name, vocabulary size, context length). Built from a GGUF file's metadata,
// or a HF checkpoint directory's config.json, tokenizer.json and tokenizer_config.json: the
// router never loads weights.
//
// Immutable after construction; safe to share between request threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/format/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "router/request_validation.h"

namespace tandem {

class ServedModel {
 public:
  // A directory is a HF checkpoint (FromHfDirectory), anything else a GGUF file (FromGguf).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ServedModel>> Load(const std::string& path,
                                                                         const std::string& name);
  // `name` empty = the file's general.name. Errors: those of TokenizerFromGguf; NotFound when
  // <arch>.context_length is missing; InvalidArgument when no name is given and general.name is
  // absent, or the context length is not positive.
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

  // Token ids of a prompt that passed ValidatePromptInput: text with special tokens parsed,
  // chat as ChatML with the assistant turn opened (and, like the model's chat template, its
  // default system message when the conversation does not start with one), token ids as given.
  // BOS is prepended to text and chat prompts when the model asks for it.
  std::vector<int32_t> Tokenize(const PromptInput& prompt) const;

 private:
  ServedModel(std::shared_ptr<const Tokenizer> tokenizer, ModelLimits limits,
              std::string default_system)
      : tokenizer_(std::move(tokenizer)),
        limits_(std::move(limits)),
        default_system_(std::move(default_system)) {}

  std::shared_ptr<const Tokenizer> tokenizer_;
  ModelLimits limits_;
  std::string default_system_;  // from tokenizer.chat_template; empty = none
};

}  // namespace tandem
