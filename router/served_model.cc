#include "router/served_model.h"

#include <sys/stat.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/chat_setup.h"
#include "model/format/model_loader.h"
#include "model/tokenizer/gguf_tokenizer.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(
    const std::string& path, const std::string& name, const std::string& chat_template_file) {
  std::unique_ptr<ServedModel> model;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    TANDEM_ASSIGN_OR_RETURN(model, FromHfDirectory(path, name));
  } else {
    TANDEM_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file, GgufFile::Open(path));
    TANDEM_ASSIGN_OR_RETURN(model, FromGguf(*file, name));
  }
  if (!chat_template_file.empty()) {
    TANDEM_ASSIGN_OR_RETURN(const ChatTemplateSource source,
                            ChatTemplateFromFile(chat_template_file));
    TANDEM_ASSIGN_OR_RETURN(model->chat_, MakeChatFormatter(source, model->tokenizer_.get()));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::FromHfDirectory(const std::string& dir,
                                                                          const std::string& name) {
  LoadOptions options;
  options.load_weights = false;
  options.progress = [](absl::string_view) {};  // metadata only: nothing worth a progress line
  TANDEM_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(dir, options));
  if (loaded.tokenizer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " has no tokenizer.json: the router tokenizes prompts and detokenizes the stream"));
  }
  ModelLimits limits;
  limits.context_length = loaded.weights.config.max_context;
  if (limits.context_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": max_position_embeddings ", limits.context_length, " is not positive"));
  }
  limits.vocab_size = loaded.tokenizer->vocab_size();
  limits.name = name.empty() ? loaded.weights.config.name : name;
  TANDEM_ASSIGN_OR_RETURN(const ChatTemplateSource source, ChatTemplateFromHfDirectory(dir));
  TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<const ChatFormatter> chat,
                          MakeChatFormatter(source, loaded.tokenizer.get()));
  return std::unique_ptr<ServedModel>(
      new ServedModel(std::move(loaded.tokenizer), std::move(limits), std::move(chat)));
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::FromGguf(const GgufFile& file,
                                                                   const std::string& name) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, TokenizerFromGguf(file));
  absl::string_view arch = "llama";
  if (file.Has("general.architecture")) {
    TANDEM_ASSIGN_OR_RETURN(arch, file.GetString("general.architecture"));
  }
  ModelLimits limits;
  TANDEM_ASSIGN_OR_RETURN(limits.context_length,
                          file.GetInt(absl::StrCat(arch, ".context_length")));
  if (limits.context_length <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", arch, ".context_length ",
                                                   limits.context_length, " is not positive"));
  }
  limits.vocab_size = tokenizer->vocab_size();
  limits.name = name;
  if (limits.name.empty()) {
    if (!file.Has("general.name")) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), " has no general.name; give the served name explicitly"));
    }
    TANDEM_ASSIGN_OR_RETURN(const absl::string_view general_name, file.GetString("general.name"));
    limits.name = std::string(general_name);
  }
  TANDEM_ASSIGN_OR_RETURN(const ChatTemplateSource source, ChatTemplateFromGguf(file));
  TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<const ChatFormatter> chat,
                          MakeChatFormatter(source, tokenizer.get()));
  return std::unique_ptr<ServedModel>(
      new ServedModel(std::move(tokenizer), std::move(limits), std::move(chat)));
}

absl::StatusOr<std::vector<int32_t>> ServedModel::Tokenize(const PromptInput& prompt) const {
  switch (prompt.kind) {
    case PromptInput::Kind::kText:
      return tokenizer_->Encode(prompt.text, /*parse_special=*/true);
    case PromptInput::Kind::kChat: {
      TANDEM_ASSIGN_OR_RETURN(
          const std::string text,
          prompt.continue_final_message
              ? chat_->FormatContinuingLast(prompt.chat, prompt.tools_json)
              : chat_->Format(prompt.chat, prompt.add_generation_prompt, prompt.tools_json));
      return tokenizer_->Encode(text, /*parse_special=*/true, /*with_bos=*/chat_->add_bos());
    }
    case PromptInput::Kind::kTokenIds:
      return prompt.token_ids;
    case PromptInput::Kind::kUnset:
      break;
  }
  return std::vector<int32_t>();
}

}  // namespace tandem
