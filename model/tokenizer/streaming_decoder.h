// Incremental detokenisation for streamed generation: Push(id) returns the text that is now
// final. A UTF-8 character split across tokens (byte-fallback pieces of CJK or emoji) is held
// back until complete, so no chunk ever ends in half a character; U+FFFD is emitted only for
// bytes that can no longer become well-formed (at once when a later byte proves it, or at
// Flush for a truncated tail). The concatenation of every Push and the final Flush equals
// Tokenizer::Decode of the whole sequence.
//
// Holds a reference to the tokenizer, which must outlive it. One decoder per stream; not
// thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "model/tokenizer/tokenizer.h"

namespace tandem {

class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Well-formed UTF-8 (possibly empty) completed by this token.
  std::string Push(int32_t id);
  // Whatever is still held, with an incomplete tail replaced by U+FFFD. The decoder is then
  // empty and may be reused for a new sequence.
  std::string Flush();

  // Bytes held back waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
  bool first_ = true;  // the next Push is the sequence's first token (see Decode's first space)
};

}  // namespace tandem
