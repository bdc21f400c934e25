// SentencePiece-style merging over a scored vocabulary (GGUF tokenizer.ggml.model "llama":
// Llama 2, Mistral, TinyLlama, Phi-3), the algorithm llama.cpp's SPM tokenizer uses.
//
// A piece (spaces already escaped as U+2581 "▁") starts as one symbol per UTF-8 character;
// repeatedly the adjacent pair whose concatenation is a vocabulary token with the highest score
// is merged (leftmost first among equal scores) until no adjacent pair forms a token. A final
// symbol that is a token is emitted as it; any other (a character missing from the vocabulary)
// falls back to one byte token "<0xHH>" per byte (or, lacking one, the token whose text is that
// single byte; lacking both, the unknown token; lacking that, the byte is dropped).
//
// O(n log n) per piece (linked symbols + a max-heap with lazy invalidation). Immutable after
// Create; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

class SpmMerger {
 public:
  // tokens: id -> text; scores: id -> score (same size, else InvalidArgument). A text listed
  // twice maps to its last id, as llama.cpp's vocabulary map does. unk_id: -1 = none.
  static absl::StatusOr<SpmMerger> Create(absl::Span<const std::string> tokens,
                                          absl::Span<const float> scores, int32_t unk_id);

  // Appends the ids of one escaped piece to out.
  void Encode(absl::string_view piece, std::vector<int32_t>* out) const;

  // Token for a raw byte by the fallback above; -1 when there is none.
  int32_t ByteToken(uint8_t b) const { return byte_tokens_[b]; }

 private:
  int32_t Find(absl::string_view text) const;

  absl::flat_hash_map<std::string, int32_t> ids_;
  std::vector<float> scores_;
  std::array<int32_t, 256> byte_tokens_{};
};

}  // namespace tandem
