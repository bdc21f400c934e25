#include "model/tokenizer/hf_spm.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem {
namespace {

using Value = nlohmann::json;

constexpr absl::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string TypeOf(const Value* v) {
  if (v == nullptr || !v->is_object()) return "";
  const Value* t = FindField(*v, "type");
  return t != nullptr && t->is_string() ? t->get<std::string>() : "";
}

std::string StringOf(const Value& v, absl::string_view key) {
  const Value* f = FindField(v, key);
  return f != nullptr && f->is_string() ? f->get<std::string>() : "";
}

bool IsNull(const Value* v) { return v == nullptr || v->is_null(); }

absl::Status Unsupported(absl::string_view field, absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat("tokenizer.json: ", field, " ", what,
                                               " is not supported (SentencePiece-style BPE)"));
}

// Replace {"pattern": {"String": from}, "content": to}.
bool IsReplace(const Value& v, absl::string_view from, absl::string_view to) {
  if (TypeOf(&v) != "Replace") return false;
  const Value* pattern = FindField(v, "pattern");
  if (pattern == nullptr || !pattern->is_object()) return false;
  return StringOf(*pattern, "String") == from && StringOf(v, "content") == to;
}

std::vector<std::string> StepTypes(const Value& sequence, absl::string_view list) {
  std::vector<std::string> types;
  const Value* steps = FindField(sequence, list);
  if (steps == nullptr || !steps->is_array()) return types;
  for (const Value& s : *steps) types.push_back(TypeOf(&s));
  return types;
}

absl::Status CheckNormalizer(const Value* n) {
  const std::string type = TypeOf(n);
  if (type != "Sequence") {
    return Unsupported("normalizer", IsNull(n) ? "null" : absl::StrCat("'", type, "'"));
  }
  const Value& steps = n->at("normalizers");
  const bool ok = steps.is_array() && steps.size() == 2 && TypeOf(&steps[0]) == "Prepend" &&
                  StringOf(steps[0], "prepend") == kSpace && IsReplace(steps[1], " ", kSpace);
  if (!ok) {
    return Unsupported("normalizer",
                       absl::StrCat("Sequence[", absl::StrJoin(StepTypes(*n, "normalizers"), ", "),
                                    "] (expected Prepend '▁', Replace ' ' -> '▁')"));
  }
  return absl::OkStatus();
}

absl::Status CheckDecoder(const Value* d) {
  const std::string type = TypeOf(d);
  if (type != "Sequence") {
    return Unsupported("decoder", IsNull(d) ? "null" : absl::StrCat("'", type, "'"));
  }
  const Value& steps = d->at("decoders");
  const auto is_strip = [](const Value& v) {
    if (TypeOf(&v) != "Strip" || StringOf(v, "content") != " ") return false;
    const Value* start = FindField(v, "start");
    const Value* stop = FindField(v, "stop");
    return start != nullptr && stop != nullptr && start->is_number_integer() &&
           stop->is_number_integer() && start->get<int64_t>() == 1 && stop->get<int64_t>() == 0;
  };
  const bool ok = steps.is_array() && steps.size() == 4 && IsReplace(steps[0], kSpace, " ") &&
                  TypeOf(&steps[1]) == "ByteFallback" && TypeOf(&steps[2]) == "Fuse" &&
                  is_strip(steps[3]);
  if (!ok) {
    return Unsupported("decoder",
                       absl::StrCat("Sequence[", absl::StrJoin(StepTypes(*d, "decoders"), ", "),
                                    "] (expected Replace '▁' -> ' ', ByteFallback, Fuse, Strip ' ' "
                                    "1 0)"));
  }
  return absl::OkStatus();
}

bool IsByteToken(absl::string_view text) {
  if (text.size() != 6 || !absl::StartsWith(text, "<0x") || text[5] != '>') return false;
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return hex(text[3]) && hex(text[4]);
}

}  // namespace

bool IsHfSentencePiece(const Value& root) {
  const Value* model = FindField(root, "model");
  if (model == nullptr || TypeOf(model) != "BPE") return false;
  const Value* fallback = FindField(*model, "byte_fallback");
  return fallback != nullptr && fallback->is_boolean() && fallback->get<bool>();
}

absl::Status ReadHfSentencePiece(const Value& root, TokenizerSpec* spec) {
  const Value& model = root.at("model");
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    const Value* v = FindField(model, key);
    if (!IsNull(v)) return Unsupported(absl::StrCat("model.", key), v->dump());
  }
  SpacePrefix space_prefix = SpacePrefix::kEverySpan;
  if (const Value* pre = FindField(root, "pre_tokenizer"); !IsNull(pre)) {
    if (TypeOf(pre) != "Metaspace") {
      return Unsupported("pre_tokenizer", absl::StrCat("'", TypeOf(pre), "'"));
    }
    // transformers' non-legacy LlamaConverter: Metaspace("▁", prepend_scheme first, split
    // false) and no normalizer.
    const std::string scheme = StringOf(*pre, "prepend_scheme");
    const Value* split = FindField(*pre, "split");
    if (StringOf(*pre, "replacement") != kSpace) {
      return Unsupported("pre_tokenizer Metaspace replacement",
                         absl::StrCat("'", StringOf(*pre, "replacement"), "'"));
    }
    if (scheme != "first" && scheme != "always") {
      return Unsupported("pre_tokenizer Metaspace prepend_scheme", absl::StrCat("'", scheme, "'"));
    }
    if (split == nullptr || !split->is_boolean() || split->get<bool>()) {
      return Unsupported("pre_tokenizer Metaspace split",
                         split == nullptr ? "(absent: true)" : split->dump());
    }
    if (const Value* n = FindField(root, "normalizer"); !IsNull(n)) {
      return Unsupported("normalizer", absl::StrCat("'", TypeOf(n), "' with Metaspace"));
    }
    space_prefix =
        scheme == "first" ? SpacePrefix::kFirstSpanUnlessSpace : SpacePrefix::kEverySpanUnlessSpace;
  } else if (absl::Status s = CheckNormalizer(FindField(root, "normalizer")); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckDecoder(FindField(root, "decoder")); !s.ok()) return s;

  spec->model = TokenizerModel::kSentencePiece;
  spec->add_space_prefix = true;
  spec->space_prefix = space_prefix;
  // post_processor TemplateProcessing whose single-sequence template starts with a special
  // token (Llama 2's "<s> $A"): BOS in front of every prompt.
  spec->add_bos = false;
  if (const Value* post = FindField(root, "post_processor"); TypeOf(post) == "TemplateProcessing") {
    const Value* single = FindField(*post, "single");
    spec->add_bos = single != nullptr && single->is_array() && !single->empty() &&
                    (*single)[0].is_object() && FindField((*single)[0], "SpecialToken") != nullptr;
  }
  absl::flat_hash_map<std::string, int32_t> ids;
  for (size_t i = 0; i < spec->tokens.size(); ++i) {
    ids.try_emplace(spec->tokens[i], static_cast<int32_t>(i));
  }
  // Below every merge's score: produced by no merge, such a token never wins a pair that a
  // listed merge could take.
  const float kNoMerge = -static_cast<float>(spec->merges.size()) - 1.f;
  spec->scores.assign(spec->tokens.size(), kNoMerge);
  for (size_t rank = 0; rank < spec->merges.size(); ++rank) {
    const auto& [left, right] = spec->merges[rank];
    const auto it = ids.find(absl::StrCat(left, right));
    if (it == ids.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: merge '", left, " ", right, "' makes no vocabulary token"));
    }
    float& score = spec->scores[static_cast<size_t>(it->second)];
    if (score == kNoMerge) score = -static_cast<float>(rank);
  }
  spec->merges.clear();
  for (size_t i = 0; i < spec->tokens.size(); ++i) {
    if (spec->kinds[i] == TokenKind::kNormal && IsByteToken(spec->tokens[i])) {
      spec->kinds[i] = TokenKind::kByte;
    }
  }
  const std::string unk = StringOf(model, "unk_token");
  if (!unk.empty()) {
    const auto it = ids.find(unk);
    if (it == ids.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: model.unk_token '", unk, "' is not in the vocabulary"));
    }
    spec->unk_id = it->second;
  }
  return absl::OkStatus();
}

}  // namespace tandem
