#include "model/tokenizer/hf_tokenizer.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/json_struct.h"
#include "model/format/mapped_file.h"

namespace tandem {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr uint64_t kMaxJsonBytes = 256 << 20;

// The Llama 3 pre-tokenizer regex exactly as tokenizer.json spells it.
constexpr absl::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string TypeOf(const Value& v) {
  if (v.kind_case() != Value::kStructValue) return "";
  const Value* t = FindField(v.struct_value(), "type");
  return t != nullptr && t->kind_case() == Value::kStringValue ? t->string_value() : "";
}

bool BoolOr(const Value& v, absl::string_view key, bool fallback) {
  const Value* f = FindField(v.struct_value(), key);
  return f != nullptr && f->kind_case() == Value::kBoolValue ? f->bool_value() : fallback;
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
  const Value* list = FindField(pre->struct_value(), "pretokenizers");
  if (list == nullptr || list->kind_case() != Value::kListValue ||
      list->list_value().values_size() != 2) {
    return unsupported("Sequence other than two steps");
  }
  const Value& first = list->list_value().values(0);
  const Value& second = list->list_value().values(1);
  if (TypeOf(second) != "ByteLevel" || BoolOr(second, "add_prefix_space", false)) {
    return unsupported("Sequence not ending in ByteLevel");
  }
  if (TypeOf(first) == "Digits" && BoolOr(first, "individual_digits", false) &&
      BoolOr(second, "use_regex", true)) {
    return PreTokenizerKind::kDigitsGpt2;
  }
  if (TypeOf(first) == "Split" && !BoolOr(second, "use_regex", true)) {
    const Value* pattern = FindField(first.struct_value(), "pattern");
    const Value* regex = pattern != nullptr && pattern->kind_case() == Value::kStructValue
                             ? FindField(pattern->struct_value(), "Regex")
                             : nullptr;
    if (regex != nullptr && regex->kind_case() == Value::kStringValue &&
        regex->string_value() == kLlama3Pattern) {
      return PreTokenizerKind::kLlama3;
    }
  }
  return unsupported(absl::StrCat("Sequence[", TypeOf(first), ", ByteLevel]"));
}

absl::Status ReadVocab(const Struct& model, TokenizerSpec& spec) {
  const Value* vocab = FindField(model, "vocab");
  if (vocab == nullptr || vocab->kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError("tokenizer.json: model.vocab is missing or not an object");
  }
  const auto& fields = vocab->struct_value().fields();
  for (const auto& [text, id_value] : fields) {
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
  if (merges == nullptr || merges->kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError("tokenizer.json: model.merges is missing or not a list");
  }
  for (const Value& m : merges->list_value().values()) {
    if (m.kind_case() == Value::kStringValue) {
      const std::string& s = m.string_value();
      const size_t space = s.find(' ');
      if (space == std::string::npos) {
        return absl::InvalidArgumentError("tokenizer.json: merge '" + s + "' has no space");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.kind_case() == Value::kListValue && m.list_value().values_size() == 2 &&
               m.list_value().values(0).kind_case() == Value::kStringValue &&
               m.list_value().values(1).kind_case() == Value::kStringValue) {
      spec.merges.emplace_back(m.list_value().values(0).string_value(),
                               m.list_value().values(1).string_value());
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
  if (added->kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError("tokenizer.json: added_tokens is not a list");
  }
  for (const Value& a : added->list_value().values()) {
    if (a.kind_case() != Value::kStructValue) {
      return absl::InvalidArgumentError("tokenizer.json: an added token is not an object");
    }
    const Value* id_value = FindField(a.struct_value(), "id");
    const Value* content = FindField(a.struct_value(), "content");
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
  if (v->kind_case() == Value::kListValue) {
    if (v->list_value().values_size() == 0) return -1;
    v = &v->list_value().values(0);
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
  if (v->kind_case() == Value::kListValue) {
    for (const Value& item : v->list_value().values()) items.push_back(&item);
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
    return absl::UnimplementedError("tokenizer.json: only model type 'BPE' is supported");
  }
  if (BoolOr(*model, "byte_fallback", false)) {
    return absl::UnimplementedError("tokenizer.json: byte_fallback BPE is not supported");
  }
  if (FindField(root, "normalizer") != nullptr) {
    return absl::UnimplementedError("tokenizer.json: normalizers are not supported");
  }
  TokenizerSpec spec;
  TANDEM_ASSIGN_OR_RETURN(spec.pre, PreTokenizerOf(FindField(root, "pre_tokenizer")));
  spec.ignore_merges = BoolOr(*model, "ignore_merges", false);  // Llama 3 sets it
  TANDEM_RETURN_IF_ERROR(ReadVocab(model->struct_value(), spec));
  TANDEM_RETURN_IF_ERROR(ReadMerges(model->struct_value(), spec));
  std::vector<std::optional<TokenKind>> kinds;
  TANDEM_RETURN_IF_ERROR(ReadAddedTokens(root, spec, kinds));
  kinds.resize(spec.tokens.size());
  // Ids must be dense: a hole would be an id no text decodes to.
  std::vector<bool> seen(spec.tokens.size(), false);
  for (const auto& [text, id] :
       model->struct_value().fields().at("vocab").struct_value().fields()) {
    seen[static_cast<size_t>(id.number_value())] = true;
  }
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (!seen[i] && !kinds[i].has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: no token has id ", i, " (ids must be dense)"));
    }
    spec.kinds.push_back(kinds[i].value_or(TokenKind::kNormal));
  }
  spec.bos_id = ids.bos_id;
  spec.eos_id = ids.eos_id;
  spec.pad_id = ids.pad_id;
  spec.add_bos = ids.add_bos;
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
      if (v != nullptr && v->kind_case() == Value::kStringValue) *out = v->string_value();
      if (v != nullptr && v->kind_case() == Value::kStructValue) {
        const Value* content = FindField(v->struct_value(), "content");
        if (content != nullptr && content->kind_case() == Value::kStringValue) {
          *out = content->string_value();
        }
      }
    }
    if (const Value* v = FindField(tc, "add_bos_token"); v != nullptr) {
      TANDEM_ASSIGN_OR_RETURN(ids.add_bos, JsonBool(*v, "tokenizer_config.json: add_bos_token"));
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
