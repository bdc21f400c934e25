#include "model/chat_template/chat_setup.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/json_value.h"
#include "model/format/mapped_file.h"

namespace tandem {
namespace {

constexpr uint64_t kMaxTemplateBytes = 16 << 20;
constexpr uint64_t kMaxConfigBytes = 64 << 20;

std::string TokenTextOr(const Tokenizer* tokenizer, std::optional<int32_t> id) {
  if (tokenizer == nullptr || !id.has_value()) return "";
  absl::StatusOr<absl::string_view> text = tokenizer->TokenText(*id);
  return text.ok() ? std::string(*text) : "";
}

}  // namespace

absl::StatusOr<ChatTemplateSource> ChatTemplateFromGguf(const GgufFile& file) {
  ChatTemplateSource out;
  if (!file.Has("tokenizer.chat_template")) return out;
  TANDEM_ASSIGN_OR_RETURN(const absl::string_view text, file.GetString("tokenizer.chat_template"));
  out.text = std::string(text);
  out.origin = absl::StrCat(file.path(), " (GGUF tokenizer.chat_template)");
  return out;
}

absl::StatusOr<ChatTemplateSource> ChatTemplateFromHfDirectory(const std::string& dir) {
  ChatTemplateSource out;
  const std::string jinja_file = dir + "/chat_template.jinja";
  if (PathExists(jinja_file)) {
    TANDEM_ASSIGN_OR_RETURN(out.text, ReadFileToString(jinja_file, kMaxTemplateBytes));
    out.origin = jinja_file;
    return out;
  }
  const std::string config_file = dir + "/tokenizer_config.json";
  if (!PathExists(config_file)) return out;
  TANDEM_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(config_file, kMaxConfigBytes));
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(config_file, " is not a JSON object"));
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return out;
  out.origin = absl::StrCat(config_file, " chat_template");
  if (it->is_string()) {
    out.text = it->get<std::string>();
    return out;
  }
  // transformers' named templates: [{"name": "default", "template": "..."}, {"name":
  // "tool_use", ...}]; a chat without tools uses "default".
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        out.text = entry["template"].get<std::string>();
        out.origin = absl::StrCat(config_file, " chat_template \"default\"");
        return out;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(config_file, ": chat_template lists named templates but none is \"default\""));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(config_file, ": chat_template must be a string or a list of named templates"));
}

absl::StatusOr<ChatTemplateSource> ChatTemplateFromFile(const std::string& path) {
  ChatTemplateSource out;
  TANDEM_ASSIGN_OR_RETURN(out.text, ReadFileToString(path, kMaxTemplateBytes));
  if (out.text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--chat_template ", path, " is empty"));
  }
  out.origin = absl::StrCat("--chat_template ", path);
  return out;
}

absl::StatusOr<std::shared_ptr<const ChatFormatter>> MakeChatFormatter(
    const ChatTemplateSource& source, const Tokenizer* tokenizer) {
  return ChatFormatter::Create(
      source.text, source.origin,
      TokenTextOr(tokenizer, tokenizer ? tokenizer->bos_id() : std::nullopt),
      TokenTextOr(tokenizer, tokenizer ? tokenizer->eos_id() : std::nullopt));
}

absl::StatusOr<std::shared_ptr<const ChatFormatter>> LoadChatFormatter(
    const std::string& model_path, const std::string& override_file, const Tokenizer* tokenizer) {
  ChatTemplateSource source;
  if (!override_file.empty()) {
    TANDEM_ASSIGN_OR_RETURN(source, ChatTemplateFromFile(override_file));
  } else {
    struct stat st;
    if (::stat(model_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      TANDEM_ASSIGN_OR_RETURN(source, ChatTemplateFromHfDirectory(model_path));
    } else {
      TANDEM_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file, GgufFile::Open(model_path));
      TANDEM_ASSIGN_OR_RETURN(source, ChatTemplateFromGguf(*file));
    }
  }
  return MakeChatFormatter(source, tokenizer);
}

}  // namespace tandem
