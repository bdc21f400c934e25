// Tokenizer from a Hugging Face tokenizer.json: the SentencePiece shape of Llama 2 / Mistral /
// TinyLlama (BPE with byte_fallback, Prepend/Replace normalizer: model/tokenizer/hf_spm.h), or
// byte-level BPE: model.type "BPE" with vocab and merges ("a b" strings or [a, b] pairs) and
// ignore_merges (a pre-token piece that is a token is kept whole; Llama 3), added_tokens (special
// -> control, else user-defined), normalizer null, and one of the pre-tokenizers of pretokenizer.h:
//   ByteLevel (use_regex)                                   -> kGpt2
//   Sequence[Digits(individual_digits), ByteLevel]          -> kDigitsGpt2
//   Sequence[Split(Llama-3 regex, Isolated), ByteLevel(no regex)] -> kLlama3
// BOS/EOS are not in tokenizer.json; they come from the checkpoint's config.json
// (bos_token_id, eos_token_id: an int or a list whose first entry is used) or
// tokenizer_config.json
// (bos_token/eos_token texts, add_bos_token). Every eos_token_id of config.json and
// generation_config.json (an int or a list: Llama 3.1 lists <|end_of_text|>, <|eom_id|> and
// <|eot_id|>) ends generation.
//
// Errors: InvalidArgument (malformed JSON or vocabulary), Unimplemented (other models,
// normalizers or pre-tokenizers), NotFound (missing files).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

struct HfSpecialIds {
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_bos_given = false;     // add_bos came from tokenizer_config.json (else the JSON decides)
  std::vector<int32_t> stop_ids;  // further ids that end generation
};

[[nodiscard]] absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfJson(
    absl::string_view tokenizer_json, const HfSpecialIds& ids);

// dir/tokenizer.json with ids from dir/config.json and dir/tokenizer_config.json (both
// optional).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfDirectory(
    const std::string& dir);

}  // namespace tandem
