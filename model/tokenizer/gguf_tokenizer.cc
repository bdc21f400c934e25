#include "model/tokenizer/gguf_tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

// The id under `key`, or `fallback` when the key is absent.
absl::StatusOr<int32_t> OptionalId(const GgufFile& f, absl::string_view key, int32_t fallback) {
  if (!f.Has(key)) return fallback;
  TANDEM_ASSIGN_OR_RETURN(const int64_t id, f.GetInt(key));
  if (id < 0 || id > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", key, " ", id, " is invalid"));
  }
  return static_cast<int32_t>(id);
}

absl::StatusOr<bool> OptionalBool(const GgufFile& f, absl::string_view key, bool fallback) {
  if (!f.Has(key)) return fallback;
  return f.GetBool(key);
}

// The byte-level BPE part: pre-tokenizer, merges and the pre-tokenizer's defaults.
absl::Status ReadBpe(const GgufFile& f, TokenizerSpec* spec) {
  if (!f.Has("tokenizer.ggml.pre")) {
    return absl::UnimplementedError(
        absl::StrCat(f.path(),
                     ": unsupported tokenizer.ggml.pre '' (missing: the converter did not record "
                     "the pre-tokenizer; reconvert the model with a current llama.cpp)"));
  }
  TANDEM_ASSIGN_OR_RETURN(const absl::string_view pre, f.GetString("tokenizer.ggml.pre"));
  const std::optional<PreTokenizerKind> kind = PreTokenizerForGgufPre(pre);
  if (!kind.has_value()) {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": unsupported tokenizer.ggml.pre '", pre, "'"));
  }
  spec->pre = *kind;
  // llama.cpp's defaults for Llama 3's pre-tokenizer: HF's ignore_merges, and BOS.
  if (*kind == PreTokenizerKind::kLlama3) {
    spec->ignore_merges = true;
    spec->add_bos = true;
  }
  TANDEM_ASSIGN_OR_RETURN(const absl::Span<const std::string> merges,
                          f.GetStringArray("tokenizer.ggml.merges"));
  spec->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    // A part may itself be a space (byte-level text never is, but be exact): split at the
    // first space after the first character, as llama.cpp does.
    const size_t space = merges[i].find(' ', 1);
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tokenizer.ggml.merges[", i, "] '",
                                                     merges[i], "' has no space"));
    }
    spec->merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
  }
  return absl::OkStatus();
}

// The SentencePiece part: scores and llama.cpp's defaults for "llama" vocabularies.
absl::Status ReadSpm(const GgufFile& f, TokenizerSpec* spec) {
  spec->model = TokenizerModel::kSentencePiece;
  if (f.Has("tokenizer.ggml.scores")) {
    TANDEM_ASSIGN_OR_RETURN(spec->scores, f.GetFloatArray("tokenizer.ggml.scores"));
    if (spec->scores.size() != spec->tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tokenizer.ggml.scores has ",
                                                     spec->scores.size(), " entries for ",
                                                     spec->tokens.size(), " tokens"));
    }
  }
  const auto in_vocab = [&](int32_t id) {
    return id < static_cast<int64_t>(spec->tokens.size()) ? id : -1;
  };
  spec->bos_id = in_vocab(1);
  spec->eos_id = in_vocab(2);
  spec->unk_id = in_vocab(0);
  spec->add_bos = true;
  TANDEM_ASSIGN_OR_RETURN(spec->add_space_prefix,
                          OptionalBool(f, "tokenizer.ggml.add_space_prefix", true));
  TANDEM_ASSIGN_OR_RETURN(const bool remove_extra_ws,
                          OptionalBool(f, "tokenizer.ggml.remove_extra_whitespaces", false));
  if (remove_extra_ws) {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": unsupported tokenizer.ggml.remove_extra_whitespaces 'true'"));
  }
  return absl::OkStatus();
}

// llama.cpp's per-model attribute for Phi-3 (keyed by general.name there too): special tokens
// swallow the whitespace after them, except <unk>, <s> and <|endoftext|>.
absl::Status ApplyPhi3Rstrip(const GgufFile& f, TokenizerSpec* spec) {
  if (!f.Has("general.name")) return absl::OkStatus();
  TANDEM_ASSIGN_OR_RETURN(const absl::string_view name, f.GetString("general.name"));
  const std::string lower = absl::AsciiStrToLower(name);
  if (!absl::StrContains(lower, "phi-3") && !absl::StrContains(lower, "phi3")) {
    return absl::OkStatus();
  }
  for (size_t i = 0; i < spec->tokens.size(); ++i) {
    const TokenKind k = spec->kinds.empty() ? TokenKind::kNormal : spec->kinds[i];
    const std::string& text = spec->tokens[i];
    const bool special =
        k == TokenKind::kControl || k == TokenKind::kUserDefined || k == TokenKind::kUnknown;
    if ((special || text == "</s>") && text != "<unk>" && text != "<s>" &&
        text != "<|endoftext|>") {
      spec->rstrip_ids.push_back(static_cast<int32_t>(i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Build(const GgufFile& f) {
  TANDEM_ASSIGN_OR_RETURN(const absl::string_view model, f.GetString("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama") {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": unsupported tokenizer.ggml.model '", model,
                     "' (supported: 'gpt2' byte-level BPE, 'llama' SentencePiece)"));
  }
  TokenizerSpec spec;
  TANDEM_ASSIGN_OR_RETURN(const absl::Span<const std::string> tokens,
                          f.GetStringArray("tokenizer.ggml.tokens"));
  spec.tokens.assign(tokens.begin(), tokens.end());
  if (f.Has("tokenizer.ggml.token_type")) {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<int64_t> types,
                            f.GetIntArray("tokenizer.ggml.token_type"));
    spec.kinds.reserve(types.size());
    for (const int64_t t : types) {
      if (t < static_cast<int>(TokenKind::kNormal) || t > static_cast<int>(TokenKind::kByte)) {
        return absl::InvalidArgumentError(
            absl::StrCat(f.path(), ": tokenizer.ggml.token_type holds unknown type ", t));
      }
      spec.kinds.push_back(static_cast<TokenKind>(t));
    }
  }
  if (model == "gpt2") {
    TANDEM_RETURN_IF_ERROR(ReadBpe(f, &spec));
  } else {
    TANDEM_RETURN_IF_ERROR(ReadSpm(f, &spec));
  }
  TANDEM_ASSIGN_OR_RETURN(spec.bos_id, OptionalId(f, "tokenizer.ggml.bos_token_id", spec.bos_id));
  TANDEM_ASSIGN_OR_RETURN(spec.eos_id, OptionalId(f, "tokenizer.ggml.eos_token_id", spec.eos_id));
  TANDEM_ASSIGN_OR_RETURN(spec.unk_id,
                          OptionalId(f, "tokenizer.ggml.unknown_token_id", spec.unk_id));
  TANDEM_ASSIGN_OR_RETURN(spec.pad_id, OptionalId(f, "tokenizer.ggml.padding_token_id", -1));
  // End of turn / end of message (Llama 3.1's <|eot_id|>, <|eom_id|>): generation stops there.
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    TANDEM_ASSIGN_OR_RETURN(const int32_t id, OptionalId(f, key, -1));
    if (id >= 0) spec.stop_ids.push_back(id);
  }
  TANDEM_ASSIGN_OR_RETURN(spec.add_bos,
                          OptionalBool(f, "tokenizer.ggml.add_bos_token", spec.add_bos));
  TANDEM_ASSIGN_OR_RETURN(spec.add_eos,
                          OptionalBool(f, "tokenizer.ggml.add_eos_token", spec.add_eos));
  // A vocabulary that names no BOS cannot add one (llama.cpp would assert at encode time).
  if (spec.bos_id < 0) spec.add_bos = false;
  if (spec.eos_id < 0) spec.add_eos = false;
  TANDEM_RETURN_IF_ERROR(ApplyPhi3Rstrip(f, &spec));
  return Tokenizer::Create(std::move(spec));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& f) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Build(f);
  if (!t.ok() && !absl::StartsWith(t.status().message(), f.path())) {
    return absl::Status(t.status().code(), absl::StrCat(f.path(), ": ", t.status().message()));
  }
  return t;
}

}  // namespace tandem
