// The byte-level BPE vocabulary of synthetic models: ChatML specials, the 256 byte tokens and
// merges learned from a small built-in English/chat corpus. When the requested size exceeds
// what the corpus teaches, the rest is letter pairs ("ab", " ab": normal tokens no merge
// produces, so encoding never emits them but they decode to readable text), then reserved
// control tokens. Deterministic: the same size always gives the same vocabulary.
//
// Layout: 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|> (control), 3..258 bytes 0x00..0xFF,
// then one token per distinct merge result, letter pairs, <|reserved_N|>. Pure; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

inline constexpr int kSyntheticSpecialTokens = 3;
inline constexpr int kSyntheticMinVocab = kSyntheticSpecialTokens + 256;

struct SyntheticVocab {
  std::vector<std::string> tokens;
  std::vector<TokenKind> kinds;
  std::vector<std::pair<std::string, std::string>> merges;
};

// InvalidArgument when vocab_size < kSyntheticMinVocab.
[[nodiscard]] absl::StatusOr<SyntheticVocab> BuildSyntheticVocab(int vocab_size);

}  // namespace tandem
