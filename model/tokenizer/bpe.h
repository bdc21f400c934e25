// Byte-level BPE merging: a pre-tokenised piece's bytes start as the byte tokens, then the
// adjacent pair with the lowest merge rank is merged repeatedly (leftmost first among equal
// ranks) until no mergeable pair remains — the algorithm of GPT-2 and HF's BPE model.
//
// With ignore_merges (HF's BPE option, set for Llama 3), a piece that is itself a vocabulary
// token is emitted as that token without merging.
//
// O(n log n) per piece (linked symbols + a min-heap with lazy invalidation), so long runs of
// whitespace or punctuation stay cheap. Immutable after Create; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

class BpeMerger {
 public:
  // vocab: byte-level token text -> id. A byte without a token (real vocabularies omit bytes
  // that never occur in UTF-8, e.g. 0xC0) is dropped from the input, as HF's BPE does without
  // an unknown token. merges: (left, right) in rank order; each part and their concatenation
  // must be in vocab (InvalidArgument naming the merge).
  static absl::StatusOr<BpeMerger> Create(
      const absl::flat_hash_map<std::string, int32_t>& vocab,
      absl::Span<const std::pair<std::string, std::string>> merges, bool ignore_merges = false);

  // Appends the ids of one piece (raw bytes) to out.
  void Encode(absl::string_view piece, std::vector<int32_t>* out) const;

  // -1 when the vocabulary has no token for b.
  int32_t ByteToken(uint8_t b) const { return byte_tokens_[b]; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::array<int32_t, 256> byte_tokens_{};
  absl::flat_hash_map<uint64_t, Merge> merges_;
  // ignore_merges only: raw bytes of every byte-level token -> id.
  absl::flat_hash_map<std::string, int32_t> whole_;
};

}  // namespace tandem
