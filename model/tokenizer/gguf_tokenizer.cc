#include "model/tokenizer/gguf_tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

absl::StatusOr<int32_t> OptionalId(const GgufFile& f, absl::string_view key) {
  if (!f.Has(key)) return -1;
  TANDEM_ASSIGN_OR_RETURN(const int64_t id, f.GetInt(key));
  if (id < 0 || id > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", key, " ", id, " is invalid"));
  }
  return static_cast<int32_t>(id);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& f) {
  TANDEM_ASSIGN_OR_RETURN(const absl::string_view model, f.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(
        f.path(), ": tokenizer model '", model, "' is not supported (only byte-level BPE 'gpt2')"));
  }
  TokenizerSpec spec;
  absl::string_view pre = "default";
  if (f.Has("tokenizer.ggml.pre")) {
    TANDEM_ASSIGN_OR_RETURN(pre, f.GetString("tokenizer.ggml.pre"));
  }
  const std::optional<PreTokenizerKind> kind = PreTokenizerForGgufPre(pre);
  if (!kind.has_value()) {
    return absl::UnimplementedError(absl::StrCat(f.path(), ": pre-tokenizer '", pre,
                                                 "' (tokenizer.ggml.pre) is not supported"));
  }
  spec.pre = *kind;
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
  TANDEM_ASSIGN_OR_RETURN(const absl::Span<const std::string> merges,
                          f.GetStringArray("tokenizer.ggml.merges"));
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const size_t space = merges[i].find(' ');
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tokenizer.ggml.merges[", i, "] '",
                                                     merges[i], "' has no space"));
    }
    spec.merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
  }
  TANDEM_ASSIGN_OR_RETURN(spec.bos_id, OptionalId(f, "tokenizer.ggml.bos_token_id"));
  TANDEM_ASSIGN_OR_RETURN(spec.eos_id, OptionalId(f, "tokenizer.ggml.eos_token_id"));
  TANDEM_ASSIGN_OR_RETURN(spec.pad_id, OptionalId(f, "tokenizer.ggml.padding_token_id"));
  if (f.Has("tokenizer.ggml.add_bos_token")) {
    TANDEM_ASSIGN_OR_RETURN(spec.add_bos, f.GetBool("tokenizer.ggml.add_bos_token"));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(spec));
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(f.path(), ": ", t.status().message()));
  }
  return t;
}

}  // namespace tandem
