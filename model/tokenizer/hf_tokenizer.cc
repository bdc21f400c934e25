#include "model/tokenizer/hf_tokenizer.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/json_value.h"
#include "model/format/mapped_file.h"
#include "model/tokenizer/hf_spm.h"

namespace tandem {
namespace {

using Struct = nlohmann::json;
using Value = nlohmann::json;

constexpr uint64_t kMaxJsonBytes = 256 << 20;

// The Llama 3 pre-tokenizer regex exactly as tokenizer.json spells it.
constexpr absl::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string TypeOf(const Value& v) {
  if (!v.is_object()) return "";
  const Value* t = FindField(v, "type");
  return t != nullptr && t->is_string() ? t->get<std::string>() : "";
}

bool BoolOr(const Value& v, absl::string_view key, bool fallback) {
  const Value* f = FindField(v, key);
  return f != nullptr && f->is_boolean() ? f->get<bool>() : fallback;
}

absl::StatusOr<PreTokenizerKind> PreTokenizerOf(const Value* pre) {
  const auto unsupported = [](absl::string_view what) {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.json: pre_tokenizer ", what, " is not supported"));
  };
  if (pre == nullptr) return unsupported("null (not byte-level BPE)");
  const std::string type = TypeOf(*pre);
  if (type == "ByteLevel") {
    if (BoolOr(*pre, "add_prefix_space", false)) return unsupported("ByteLevel(add_prefix_space)");
    if (!BoolOr(*pre, "use_regex", true)) return unsupported("ByteLevel without regex");
    return PreTokenizerKind::kGpt2;
  }
  if (type != "Sequence") return unsupported(absl::StrCat("'", type, "'"));
  const Value* list = FindField(*pre, "pretokenizers");
  if (list == nullptr || !list->is_array() || list->size() != 2) {
    return unsupported("Sequence other than two steps");
  }
  const Value& first = list->at(0);
  const Value& second = list->at(1);
  if (TypeOf(second) != "ByteLevel" || BoolOr(second, "add_prefix_space", false)) {
    return unsupported("Sequence not ending in ByteLevel");
  }
  if (TypeOf(first) == "Digits" && BoolOr(first, "individual_digits", false) &&
      BoolOr(second, "use_regex", true)) {
    return PreTokenizerKind::kDigitsGpt2;
  }
  if (TypeOf(first) == "Split" && !BoolOr(second, "use_regex", true)) {
    const Value* pattern = FindField(first, "pattern");
    const Value* regex =
        pattern != nullptr && pattern->is_object() ? FindField(*pattern, "Regex") : nullptr;
    if (regex != nullptr && regex->is_string() && regex->get<std::string>() == kLlama3Pattern) {
      return PreTokenizerKind::kLlama3;
    }
  }
  return unsupported(absl::StrCat("Sequence[", TypeOf(first), ", ByteLevel]"));
}

absl::Status ReadVocab(const Struct& model, TokenizerSpec& spec) {
  const Value* vocab = FindField(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: model.vocab is missing or not an object");
  }
  const Value& fields = *vocab;
  for (const auto& [text, id_value] : fields.items()) {
    TANDEM_ASSIGN_OR_RETURN(const int64_t id, JsonInt(id_value, "tokenizer.json: vocab id"));
    if (id < 0 || id >= static_cast<int64_t>(fields.size()) + (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: token '", text, "' has id ", id, " out of range"));
    }
    if (static_cast<size_t>(id) >= spec.tokens.size()) spec.tokens.resize(id + 1);
    spec.tokens[id] = text;
  }
  return absl::OkStatus();
}

absl::Status ReadMerges(const Struct& model, TokenizerSpec& spec) {
  const Value* merges = FindField(model, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: model.merges is missing or not a list");
  }
  for (const Value& m : *merges) {
    if (m.is_string()) {
      const std::string& s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) {
        return absl::InvalidArgumentError("tokenizer.json: merge '" + s + "' has no space");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m.at(0).is_string() && m.at(1).is_string()) {
      spec.merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          "tokenizer.json: a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const Struct& root, TokenizerSpec& spec,
                             std::vector<std::optional<TokenKind>>& kinds) {
  const Value* added = FindField(root, "added_tokens");
  if (added == nullptr) return absl::OkStatus();
  if (!added->is_array()) {
    return absl::InvalidArgumentError("tokenizer.json: added_tokens is not a list");
  }
  for (const Value& a : *added) {
    if (!a.is_object()) {
      return absl::InvalidArgumentError("tokenizer.json: an added token is not an object");
    }
    const Value* id_value = FindField(a, "id");
    const Value* content = FindField(a, "content");
    if (id_value == nullptr || content == nullptr) {
      return absl::InvalidArgumentError("tokenizer.json: an added token lacks id or content");
    }
    TANDEM_ASSIGN_OR_RETURN(const int64_t id, JsonInt(*id_value, "tokenizer.json: added id"));
    TANDEM_ASSIGN_OR_RETURN(const std::string text,
                            JsonString(*content, "tokenizer.json: added content"));
    if (id < 0 || id > static_cast<int64_t>(spec.tokens.size()) + (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: added token '", text, "' has id ", id, " out of range"));
    }
    if (static_cast<size_t>(id) >= spec.tokens.size()) spec.tokens.resize(id + 1);
    spec.tokens[id] = text;
    if (kinds.size() < spec.tokens.size()) kinds.resize(spec.tokens.size());
    kinds[id] = BoolOr(a, "special", false) ? TokenKind::kControl : TokenKind::kUserDefined;
  }
  return absl::OkStatus();
}

// An int or the first entry of a list of ints; -1 when absent.
absl::StatusOr<int32_t> IdField(const Struct& s, absl::string_view key) {
  const Value* v = FindField(s, key);
  if (v == nullptr) return -1;
  if (v->is_array()) {
    if (v->size() == 0) return -1;
    v = &v->at(0);
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t id, JsonInt(*v, absl::StrCat("config.json: ", key)));
  return static_cast<int32_t>(id);
}

// Every id of an int-or-list field (eos_token_id) appended to *out.
absl::Status AppendIds(const Struct& s, absl::string_view key, absl::string_view file,
                       std::vector<int32_t>* out) {
  const Value* v = FindField(s, key);
  if (v == nullptr) return absl::OkStatus();
  std::vector<const Value*> items;
  if (v->is_array()) {
    for (const Value& item : *v) items.push_back(&item);
  } else {
    items.push_back(v);
  }
  for (const Value* item : items) {
    TANDEM_ASSIGN_OR_RETURN(const int64_t id, JsonInt(*item, absl::StrCat(file, ": ", key)));
    if (id < 0 || id > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", key, " ", id, " is invalid"));
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfJson(absl::string_view json,
                                                               const HfSpecialIds& ids) {
  TANDEM_ASSIGN_OR_RETURN(const Struct root, ParseJsonObject(json, "tokenizer.json"));
  const Value* model = FindField(root, "model");
  if (model == nullptr || TypeOf(*model) != "BPE") {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.json: model.type '", model == nullptr ? "" : TypeOf(*model),
        "' is not supported (only 'BPE': byte-level, or SentencePiece-style with byte_fallback)"));
  }
  const bool spm = IsHfSentencePiece(root);
  if (!spm && FindField(root, "normalizer") != nullptr &&
      !FindField(root, "normalizer")->is_null()) {
    return absl::UnimplementedError(
        "tokenizer.json: normalizer is not supported for byte-level BPE");
  }
  TokenizerSpec spec;
  if (!spm) {
    TANDEM_ASSIGN_OR_RETURN(spec.pre, PreTokenizerOf(FindField(root, "pre_tokenizer")));
  }
  spec.ignore_merges = BoolOr(*model, "ignore_merges", false);  // Llama 3 sets it
  TANDEM_RETURN_IF_ERROR(ReadVocab(*model, spec));
  TANDEM_RETURN_IF_ERROR(ReadMerges(*model, spec));
  std::vector<std::optional<TokenKind>> kinds;
  TANDEM_RETURN_IF_ERROR(ReadAddedTokens(root, spec, kinds));
  kinds.resize(spec.tokens.size());
  // Ids must be dense: a hole would be an id no text decodes to.
  std::vector<bool> seen(spec.tokens.size(), false);
  for (const auto& [text, id] : model->at("vocab").items()) {
    seen[static_cast<size_t>(id.get<int64_t>())] = true;
  }
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (!seen[i] && !kinds[i].has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: no token has id ", i, " (ids must be dense)"));
    }
    spec.kinds.push_back(kinds[i].value_or(TokenKind::kNormal));
  }
  if (spm) {
    TANDEM_RETURN_IF_ERROR(ReadHfSentencePiece(root, &spec));
    if (spec.ignore_merges) {
      return absl::UnimplementedError(
          "tokenizer.json: model.ignore_merges with byte_fallback is not supported");
    }
  }
  spec.bos_id = ids.bos_id;
  spec.eos_id = ids.eos_id;
  spec.pad_id = ids.pad_id;
  // SentencePiece shape: the post_processor's template decides BOS unless tokenizer_config.json
  // does (transformers rebuilds the template from add_bos_token).
  if (!spm || ids.add_bos_given) spec.add_bos = ids.add_bos;
  spec.stop_ids = ids.stop_ids;
  return Tokenizer::Create(std::move(spec));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfDirectory(const std::string& dir) {
  TANDEM_ASSIGN_OR_RETURN(const std::string json,
                          ReadFileToString(dir + "/tokenizer.json", kMaxJsonBytes));
  HfSpecialIds ids;
  std::string bos_text, eos_text;
  if (PathExists(dir + "/config.json")) {
    TANDEM_ASSIGN_OR_RETURN(const std::string text,
                            ReadFileToString(dir + "/config.json", kMaxJsonBytes));
    TANDEM_ASSIGN_OR_RETURN(const Struct config, ParseJsonObject(text, "config.json"));
    TANDEM_ASSIGN_OR_RETURN(ids.bos_id, IdField(config, "bos_token_id"));
    TANDEM_ASSIGN_OR_RETURN(ids.eos_id, IdField(config, "eos_token_id"));
    TANDEM_ASSIGN_OR_RETURN(ids.pad_id, IdField(config, "pad_token_id"));
    TANDEM_RETURN_IF_ERROR(AppendIds(config, "eos_token_id", "config.json", &ids.stop_ids));
  }
  if (PathExists(dir + "/generation_config.json")) {
    TANDEM_ASSIGN_OR_RETURN(const std::string text,
                            ReadFileToString(dir + "/generation_config.json", kMaxJsonBytes));
    TANDEM_ASSIGN_OR_RETURN(const Struct gc, ParseJsonObject(text, "generation_config.json"));
    TANDEM_RETURN_IF_ERROR(AppendIds(gc, "eos_token_id", "generation_config.json", &ids.stop_ids));
  }
  if (PathExists(dir + "/tokenizer_config.json")) {
    TANDEM_ASSIGN_OR_RETURN(const std::string text,
                            ReadFileToString(dir + "/tokenizer_config.json", kMaxJsonBytes));
    TANDEM_ASSIGN_OR_RETURN(const Struct tc, ParseJsonObject(text, "tokenizer_config.json"));
    for (auto [key, out] : {std::pair{"bos_token", &bos_text}, std::pair{"eos_token", &eos_text}}) {
      const Value* v = FindField(tc, key);
      if (v != nullptr && v->is_string()) *out = v->get<std::string>();
      if (v != nullptr && v->is_object()) {
        const Value* content = FindField(*v, "content");
        if (content != nullptr && content->is_string()) {
          *out = content->get<std::string>();
        }
      }
    }
    if (const Value* v = FindField(tc, "add_bos_token"); v != nullptr) {
      TANDEM_ASSIGN_OR_RETURN(ids.add_bos, JsonBool(*v, "tokenizer_config.json: add_bos_token"));
      ids.add_bos_given = true;
    }
  }
  // Texts from tokenizer_config.json fill ids config.json did not give.
  const bool need_lookup =
      (ids.bos_id < 0 && !bos_text.empty()) || (ids.eos_id < 0 && !eos_text.empty());
  if (!need_lookup) return TokenizerFromHfJson(json, ids);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> probe, TokenizerFromHfJson(json, ids));
  if (ids.bos_id < 0 && !bos_text.empty()) {
    if (auto id = probe->SpecialTokenId(bos_text); id.ok()) ids.bos_id = *id;
  }
  if (ids.eos_id < 0 && !eos_text.empty()) {
    if (auto id = probe->SpecialTokenId(eos_text); id.ok()) ids.eos_id = *id;
  }
  return TokenizerFromHfJson(json, ids);
}

}  // namespace tandem
