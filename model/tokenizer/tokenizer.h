// Tokenizer of two families, as llama.cpp and HF tokenizers run them:
//  * byte-level BPE (GGUF tokenizer.ggml.model "gpt2": GPT-2, SmolLM2, Llama 3, Qwen2, ...):
//    pre-tokenise each plain span (pretokenizer.h), BPE-merge each piece (bpe.h);
//  * SentencePiece (model "llama": Llama 2, Mistral, TinyLlama, Phi-3): spaces become "▁",
//    a space is put in front of text that starts the input or follows a special token
//    (add_space_prefix; HF's Metaspace rules as SpacePrefix says), then score-ordered merging
//    with byte fallback (spm.h).
//
// Encode first splits out special tokens (longest first): user-defined tokens always, control
// and unknown tokens only with parse_special. Decode concatenates token bytes (byte-level or
// "▁"-unescaped text for normal tokens, the byte of "<0xHH>" byte tokens, special tokens as
// their text), drops the first token's leading space when add_space_prefix (as llama.cpp's
// detokenizer does) and replaces ill-formed UTF-8 by U+FFFD per maximal subpart, so Decode
// equals the concatenation of a StreamingDecoder's output. Token ids are int32 in
// [0, vocab_size()).
//
// Immutable after Create; every method is safe to call from several threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/spm.h"

namespace tandem {

// GGUF tokenizer.ggml.token_type values.
enum class TokenKind : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special: matched in text only with parse_special; skippable in Decode
  kUserDefined = 4,  // always matched in text as a whole; decoded as its text
  kUnused = 5,
  kByte = 6,
};

enum class TokenizerModel {
  kByteLevelBpe,   // GGUF "gpt2"
  kSentencePiece,  // GGUF "llama"
};

// Where SentencePiece's prefix space goes (with add_space_prefix).
enum class SpacePrefix : uint8_t {
  kEverySpan,  // every plain span, always (llama.cpp; HF's legacy Prepend normalizer)
  // HF Metaspace prepend_scheme "first": only the span at the start of the text, and not when
  // it already starts with a space.
  kFirstSpanUnlessSpace,
  kEverySpanUnlessSpace,  // HF Metaspace prepend_scheme "always"
};

struct TokenizerSpec {
  TokenizerModel model = TokenizerModel::kByteLevelBpe;
  std::vector<std::string> tokens;  // id -> text (byte-level or "▁"-escaped for normal tokens)
  std::vector<TokenKind> kinds;     // id -> kind; empty = all normal
  std::vector<std::pair<std::string, std::string>> merges;  // BPE: rank order
  std::vector<float> scores;  // SentencePiece: id -> score (higher merges first); empty = all 0
  PreTokenizerKind pre = PreTokenizerKind::kGpt2;  // BPE only
  int32_t bos_id = -1;                             // -1 = none
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;            // SentencePiece: stands for a byte without a byte token
  bool add_bos = false;           // the model expects BOS in front of every prompt
  bool add_eos = false;           // ... and EOS after it
  bool add_space_prefix = false;  // SentencePiece (see above)
  SpacePrefix space_prefix = SpacePrefix::kEverySpan;
  bool ignore_merges = false;  // BPE: a piece that is a token is kept whole (Llama 3)
  // Special tokens that swallow the whitespace after them when matched in text (llama.cpp's
  // RSTRIP attribute; Phi-3's added tokens).
  std::vector<int32_t> rstrip_ids;
  // Further ids that end generation, as the model declares them (GGUF eot/eom_token_id; HF
  // config.json / generation_config.json eos_token_id lists).
  std::vector<int32_t> stop_ids;
};

class Tokenizer {
 public:
  // InvalidArgument on an empty vocabulary, mismatched kinds, special ids out of range, or the
  // BPE errors of BpeMerger::Create. A text listed twice maps to its first id.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerSpec spec);

  // parse_special: control tokens written in the text (e.g. "<|im_end|>") become their ids;
  // otherwise they are encoded as plain text. With `with_bos` (llama.cpp's add_special), BOS
  // is prepended when add_bos() and EOS appended when add_eos().
  std::vector<int32_t> Encode(absl::string_view text, bool parse_special = false,
                              bool with_bos = true) const;

  // skip_special drops control and unknown tokens (and then keeps the leading space of a text
  // that starts with BOS, as llama.cpp does). Ids outside the vocabulary decode to U+FFFD.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes a token stands for (may be part of a UTF-8 character); empty for an id
  // outside the vocabulary.
  absl::string_view TokenBytes(int32_t id) const;
  // The vocabulary entry of id (byte-level text for normal tokens). NotFound when out of range.
  absl::StatusOr<absl::string_view> TokenText(int32_t id) const;
  TokenKind Kind(int32_t id) const;
  bool IsSpecial(int32_t id) const;  // control or user-defined
  // Id of a special token by its text ("<|im_end|>"). NotFound when there is none.
  absl::StatusOr<int32_t> SpecialTokenId(absl::string_view text) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  bool add_bos() const { return spec_add_bos_; }
  bool add_eos() const { return spec_add_eos_; }
  TokenizerModel model() const { return model_; }
  // Decode drops one leading space of the first token's bytes when this is true for that
  // first id (SentencePiece with add_space_prefix; see Decode).
  bool StripsFirstSpace(int32_t first_id, bool skip_special) const;
  // Tokens skip_special drops: control and unknown.
  bool IsSkippable(int32_t id) const;
  // Every id that ends generation: eos_id, end-of-turn control tokens of the vocabulary
  // (<|im_end|>, <|endoftext|>, <|eot_id|>, <|eom_id|>, <|end_of_text|>, <|end|>,
  // <end_of_turn>, </s>, <EOT>; only when their token type is control), and the spec's
  // stop_ids (what the model file declares).
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool IsStop(int32_t id) const;

  // OK when every id is in [0, vocab_size()); otherwise InvalidArgument naming the first bad
  // id and its position. Raw token-id prompts go through this.
  absl::Status ValidateIds(absl::Span<const int32_t> ids) const;

  PreTokenizerKind pre_tokenizer() const { return pre_; }

 private:
  Tokenizer() = default;
  // at_start: the span begins the text (SpacePrefix::kFirstSpanUnlessSpace).
  void EncodePlain(absl::string_view text, bool at_start, std::vector<int32_t>* out) const;

  TokenizerModel model_ = TokenizerModel::kByteLevelBpe;
  std::vector<std::string> tokens_;
  std::vector<TokenKind> kinds_;
  std::vector<std::string> bytes_;  // id -> decoded bytes
  PreTokenizerKind pre_ = PreTokenizerKind::kGpt2;
  std::optional<BpeMerger> bpe_;
  std::optional<SpmMerger> spm_;
  // Special tokens matched in text: (text, id), longest first.
  std::vector<std::pair<std::string, int32_t>> specials_;
  std::vector<bool> rstrip_;                    // id -> swallows the whitespace after it
  std::array<bool, 256> special_first_byte_{};  // a special token may start with this byte
  absl::flat_hash_map<std::string, int32_t> special_ids_;
  int32_t bos_id_ = -1, eos_id_ = -1;
  bool spec_add_bos_ = false;
  bool spec_add_eos_ = false;
  bool add_space_prefix_ = false;
  SpacePrefix space_prefix_ = SpacePrefix::kEverySpan;
  std::vector<int32_t> stop_ids_;
};

}  // namespace tandem
