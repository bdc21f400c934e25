// Pre-tokenisation: splitting text into the pieces BPE encodes independently, by hand-written
// matchers equivalent to the regexes models declare (no regex engine; see unicode_class.h for
// the classes). Alternatives are tried in order at each position, first match wins, exactly as
// a backtracking regex engine does.
//
//   kGpt2        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//                (HF ByteLevel with use_regex; GGUF tokenizer.ggml.pre "gpt-2", "mpt")
//   kDigitsGpt2  first isolate every \p{N} character, then kGpt2 on each remaining run
//                (HF Sequence[Digits(individual_digits), ByteLevel]; GGUF pre "smollm",
//                "starcoder", "refact")
//   kLlama3      (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (GGUF pre "llama-bpe")
//   kQwen2       kLlama3 with \p{N} instead of \p{N}{1,3} (one digit per piece; GGUF pre "qwen2")
//   kQwen35      kQwen2 with [\p{L}\p{M}]+ letter runs and [^\s\p{L}\p{M}\p{N}] "other" runs
//                (GGUF pre "qwen35")
//   kFalcon      [\p{P}$+<=>^~|`]+ isolated, then kGpt2's regex on every piece, then
//                [0-9][0-9][0-9] isolated (GGUF pre "falcon")
//   kDeepseekCoder  [\r\n], \s?\p{L}+, \s?\p{P}+, [一-龥ࠀ-一가-퟿]+ and \p{N} isolated in
//   turn
//                (GGUF pre "deepseek-coder")
//   kDeepseekLlm [\r\n], \s?[<DeepSeek's letters>]+, \s?[!-/:-~！-／：-～‘-‟　-。]+, \s+$,
//                [一-龥ࠀ-一가-퟿]+ and \p{N}+ isolated in turn (GGUF pre "deepseek-llm")
//
// A sequence of splits works as llama.cpp and HF's Split(behavior=Isolated) do: each regex
// splits every piece of the previous one, and the text between its matches stays a piece.
//
// Text is UTF-8; an ill-formed byte sequence counts as one character of none of the classes.
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <vector>

#include "absl/strings/string_view.h"

namespace tandem {

enum class PreTokenizerKind {
  kGpt2,
  kDigitsGpt2,
  kLlama3,
  kQwen2,
  kQwen35,
  kFalcon,
  kDeepseekCoder,
  kDeepseekLlm,
};

// The kind for a GGUF `tokenizer.ggml.pre` value; nullopt when unknown.
std::optional<PreTokenizerKind> PreTokenizerForGgufPre(absl::string_view pre);

// Pieces of `text`, in order, covering it exactly (views into `text`).
std::vector<absl::string_view> PreTokenize(PreTokenizerKind kind, absl::string_view text);

}  // namespace tandem
