#include "common/request_checks.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tandem {

absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int32_t vocab_size,
                           absl::string_view what) {
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(what, " token id ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ", vocab_size,
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTokenId(int32_t id, int32_t vocab_size, absl::string_view what) {
  if (id >= 0 && id < vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
}

absl::Status CheckTokenBudget(int64_t tokens, absl::string_view name, int64_t min) {
  if (tokens >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " must be >= ", min, " (got ", tokens, ")"));
}

absl::Status CheckContextFit(int64_t prompt_len, int64_t new_tokens, absl::string_view new_name,
                             int64_t context_length) {
  if (context_length <= 0) return absl::OkStatus();
  if (prompt_len > context_length) {
    return absl::InvalidArgumentError(absl::StrCat("prompt has ", prompt_len,
                                                   " tokens, more than the model's context length ",
                                                   context_length));
  }
  if (prompt_len < 0 || new_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("prompt length (", prompt_len, ") and ",
                                                   new_name, " (", new_tokens, ") must be >= 0"));
  }
  // prompt_len is in [0, context_length] here, so the difference cannot overflow (the sum could).
  if (new_tokens > context_length - prompt_len) {
    int64_t total = 0;
    const std::string sum = __builtin_add_overflow(prompt_len, new_tokens, &total)
                                ? std::string("more than 2^63")
                                : absl::StrCat(total);
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt_len, " tokens) + ", new_name, " (", new_tokens, ") = ", sum,
                     " exceeds the model's context length ", context_length));
  }
  return absl::OkStatus();
}

absl::Status CheckChoices(int64_t n) {
  if (n >= 1 && n <= kMaxChoices) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("n must be in [1, ", kMaxChoices, "] (got ", n, ")"));
}

}  // namespace tandem
