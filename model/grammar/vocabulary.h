// The vocabulary as the grammar engine sees it: each token id -> the exact bytes it adds to the
// output, or "never allowed".
//
// FromTokenizer takes Tokenizer::TokenBytes, which already undoes both encodings:
//  * byte-level BPE (SmolLM2, Llama 3, Qwen2): the unicode-mapped characters become raw bytes;
//  * SentencePiece: "▁" becomes a space and a "<0xHH>" byte token the byte 0xHH.
// Control, unknown and unused tokens are never allowed (the grammar cannot produce them, so a
// stop token is the caller's to allow: see GrammarMatcher::CanTerminate). User-defined tokens
// (always matched in text, decoded as their text) are allowed as their text. A token with no
// bytes is never allowed (it would let the model stall without progress).
//
// Building it also builds the token trie that CompileGrammar walks (the tokens sorted by their
// bytes). Copies share that data (a shared_ptr), so keep one per model and pass it around.
// Immutable; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

namespace grammar_internal {
struct VocabData;
}  // namespace grammar_internal

class Vocabulary {
 public:
  // `allow_special_as_text`: control tokens to allow anyway, as their text (e.g. a model whose
  // tool-call marker is a control token the caller wants the grammar to spell); ids out of
  // range are ignored.
  static Vocabulary FromTokenizer(const Tokenizer& tokenizer,
                                  absl::Span<const int32_t> allow_special_as_text = {});
  // Tests and tools: token id -> bytes; `never_allowed` (empty = none) marks special tokens.
  // InvalidArgument on an empty vocabulary or mismatched sizes.
  static absl::StatusOr<Vocabulary> FromTokenBytes(std::vector<std::string> bytes,
                                                   std::vector<bool> never_allowed = {});

  int32_t size() const;
  // Bytes of `id` (empty for ids out of range).
  std::string_view TokenBytes(int32_t id) const;
  // Special tokens and empty tokens: the matcher never allows them.
  bool IsNeverAllowed(int32_t id) const;
  // Longest token, in bytes.
  size_t max_token_bytes() const;

  const grammar_internal::VocabData& data() const { return *data_; }

 private:
  explicit Vocabulary(std::shared_ptr<const grammar_internal::VocabData> data)
      : data_(std::move(data)) {}
  std::shared_ptr<const grammar_internal::VocabData> data_;
};

}  // namespace tandem
