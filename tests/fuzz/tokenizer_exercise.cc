#include "tests/fuzz/tokenizer_exercise.h"

#include <string>
#include <vector>

#include "model/tokenizer/streaming_decoder.h"
#include "tests/fuzz/fuzz_check.h"

namespace tandem::fuzz {
namespace {

void CheckStreamingMatchesDecode(const Tokenizer& tokenizer, absl::Span<const int32_t> ids) {
  for (bool skip_special : {false, true}) {
    StreamingDecoder decoder(tokenizer, skip_special);
    std::string streamed;
    for (int32_t id : ids) streamed += decoder.Push(id);
    streamed += decoder.Flush();
    TANDEM_FUZZ_CHECK(decoder.pending_bytes() == 0);
    TANDEM_FUZZ_CHECK(streamed == tokenizer.Decode(ids, skip_special));
  }
}

}  // namespace

void ExerciseTokenizer(const Tokenizer& tokenizer, absl::string_view text,
                       absl::Span<const int32_t> extra_ids) {
  for (bool parse_special : {false, true}) {
    const std::vector<int32_t> ids = tokenizer.Encode(text, parse_special);
    TANDEM_FUZZ_CHECK(tokenizer.ValidateIds(ids).ok());
    CheckStreamingMatchesDecode(tokenizer, ids);
  }
  for (int32_t id : extra_ids) {
    (void)tokenizer.TokenBytes(id);
    (void)tokenizer.TokenText(id);
    (void)tokenizer.Kind(id);
    (void)tokenizer.IsStop(id);
  }
  (void)tokenizer.ValidateIds(extra_ids);
  CheckStreamingMatchesDecode(tokenizer, extra_ids);
}

}  // namespace tandem::fuzz
