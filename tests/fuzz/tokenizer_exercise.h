// What the tokenizer fuzzers do with a Tokenizer once one is built: encode text (with and
// without special tokens), decode ids (in and out of the vocabulary) and check the documented
// invariants — encoded ids lie in the vocabulary, and a StreamingDecoder's output equals
// Decode of the same ids.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem::fuzz {

void ExerciseTokenizer(const Tokenizer& tokenizer, absl::string_view text,
                       absl::Span<const int32_t> extra_ids);

}  // namespace tandem::fuzz
