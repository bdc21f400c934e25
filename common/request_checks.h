// Checks of a generation request's token ids and lengths, written once and called by every layer
// that accepts a request: the router (router/request_validation.h orders them for the client),
// the prefill and decode engines and nodes. Sampling values are checked by
// ValidateSamplingParams (model/sampling.h). Pure; every failure is INVALID_ARGUMENT with a
// message naming the field and value.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

// Every id in [0, vocab_size): "<what> token id 7 at position 2 is outside the vocabulary
// [0, 5)"; an empty list is "<what> is empty".
[[nodiscard]] absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int32_t vocab_size,
                                         absl::string_view what);

// One id in [0, vocab_size): "<what> 7 is outside the vocabulary [0, 5)".
[[nodiscard]] absl::Status CheckTokenId(int32_t id, int32_t vocab_size, absl::string_view what);

// A token budget of at least `min`: "<name> must be >= 1 (got 0)".
[[nodiscard]] absl::Status CheckTokenBudget(int64_t tokens, absl::string_view name,
                                            int64_t min = 1);

// The prompt and the tokens still to come fit the context (prompt_len + new_tokens <=
// context_length); context_length <= 0 means the model states none and everything fits.
// "prompt has 65 tokens, more than the model's context length 64" or "prompt (2 tokens) +
// <new_name> (63) = 65 exceeds the model's context length 64". With a context, negative lengths
// are "prompt length (-1) and <new_name> (3) must be >= 0".
[[nodiscard]] absl::Status CheckContextFit(int64_t prompt_len, int64_t new_tokens,
                                           absl::string_view new_name, int64_t context_length);

// Choices of one request (GenerateRequest.n, docs/router.md#n-choices-from-one-prefill): at most
// this many, decoded from one prefill.
inline constexpr int32_t kMaxChoices = 64;

// n in [1, kMaxChoices]: "n must be in [1, 64] (got 0)".
[[nodiscard]] absl::Status CheckChoices(int64_t n);

}  // namespace tandem
