// Tokenizer from GGUF metadata (tokenizer.ggml.*), with llama.cpp's defaults and rules:
//  * model "gpt2" (byte-level BPE): tokens, token_type, merges ("left right"), pre (the
//    pre-tokenizer, see PreTokenizerForGgufPre; absent or "default" — a converter that did not
//    recognise it — is refused rather than guessed). "llama-bpe" (Llama 3) and its aliases
//    keep a piece that is a token whole (ignore_merges) and add BOS by default.
//  * model "llama" (SentencePiece): tokens, scores, token_type; BOS 1, EOS 2 and unknown 0
//    unless the ids are given; add_bos_token true, add_eos_token false and add_space_prefix
//    true unless given. remove_extra_whitespaces true is refused.
//  * both: bos/eos/unknown/padding_token_id, add_bos_token, add_eos_token; eot_token_id and
//    eom_token_id join the stop ids. A model whose
//    general.name contains "phi-3"/"phi3" (any case) gets llama.cpp's Phi-3 rule: every special
//    token but <unk>, <s> and <|endoftext|> swallows the whitespace after it.
// Reads metadata only; no tensor data is touched (vocabulary-only GGUFs load).
//
// Errors: NotFound (missing key), InvalidArgument (malformed arrays/ids), Unimplemented naming
// the value for another tokenizer model ("bert", "t5", ...) or an unsupported
// tokenizer.ggml.pre.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/format/gguf_file.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

[[nodiscard]] absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& file);

}  // namespace tandem
