// The SentencePiece shape of a Hugging Face tokenizer.json — what transformers' LlamaConverter
// writes for Llama 2, Mistral (v0.1/v0.2) and TinyLlama — read into a TokenizerSpec that runs
// the SentencePiece path (tokenizer.h; the same code as GGUF tokenizer.ggml.model "llama"):
//
//   model:      {"type": "BPE", "byte_fallback": true, "vocab": {...}, "merges": [...],
//                "unk_token": "<unk>", dropout/continuing_subword_prefix/end_of_word_suffix
//                null or absent}
//   normalizer: Sequence[Prepend "▁", Replace " " -> "▁"]   (-> add_space_prefix; every plain
//               span, as the normalizer runs on each span between added tokens)
//   pre_tokenizer: null
// or, as the non-legacy converter (Mistral v0.3 and later conversions) writes it,
//   normalizer: null
//   pre_tokenizer: Metaspace {"replacement": "▁", "prepend_scheme": "first" | "always",
//                  "split": false}  (-> SpacePrefix: "▁" in front of the span that starts the
//                  text ("first") or of every span ("always"), never when it starts with a space)
// and in both
//   decoder:    Sequence[Replace "▁" -> " ", ByteFallback, Fuse, Strip " " (start 1, stop 0)]
//
// The merges become SentencePiece scores: a token's score is minus the rank of the first merge
// producing it (tokens no merge produces score below every merge), so "merge the pair with the
// lowest rank" and "merge the pair whose result scores highest" pick the same pair — the
// converter lists, for every piece, all of its splits into two vocabulary pieces, ordered by
// the piece's SentencePiece score. Vocabulary entries "<0xHH>" are byte tokens.
//
// Anything else is refused (Unimplemented) naming the field: other pre-tokenizers, Metaspace with
// another replacement, prepend_scheme "never" or split true, other normalizers or decoders,
// dropout, subword affixes. Unigram models are refused by the caller.
//
// Pure; thread-safe.
#pragma once

#include "absl/status/status.h"
#include "model/format/json_value.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

// True when the model is BPE with byte_fallback (the SentencePiece shape above).
bool IsHfSentencePiece(const nlohmann::json& root);

// Fills spec->model, scores, kinds of byte tokens (kinds must be sized to tokens, added tokens
// already marked), unk_id, add_space_prefix and add_bos (true when the post_processor's
// TemplateProcessing "single" starts with a special token), after checking the shape above.
// spec->tokens and spec->merges are read by the caller.
[[nodiscard]] absl::Status ReadHfSentencePiece(const nlohmann::json& root, TokenizerSpec* spec);

}  // namespace tandem
