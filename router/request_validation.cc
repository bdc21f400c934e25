#include "router/request_validation.h"

#include "absl/strings/str_cat.h"

namespace tandem {

absl::Status ValidateModelName(absl::string_view requested, const ModelLimits& limits) {
  if (requested.empty() || requested == limits.name) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      "model '", requested, "' is not served here; this router serves '", limits.name, "'"));
}

absl::Status ValidatePromptInput(const PromptInput& prompt) {
  switch (prompt.kind) {
    case PromptInput::Kind::kUnset:
      return absl::InvalidArgumentError("no prompt: set one of text, token_ids or chat");
    case PromptInput::Kind::kText:
      if (prompt.text.empty()) return absl::InvalidArgumentError("prompt text is empty");
      return absl::OkStatus();
    case PromptInput::Kind::kTokenIds:
      if (prompt.token_ids.empty()) return absl::InvalidArgumentError("prompt token_ids is empty");
      return absl::OkStatus();
    case PromptInput::Kind::kChat:
      if (prompt.chat.empty()) return absl::InvalidArgumentError("chat has no messages");
      for (size_t i = 0; i < prompt.chat.size(); ++i) {
        const std::string& role = prompt.chat[i].role;
        if (role != "system" && role != "user" && role != "assistant") {
          return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has role '", role,
                                                         "' (valid: system, user, assistant)"));
        }
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown prompt kind");
}

absl::Status ValidateMaxTokens(int32_t max_tokens) {
  if (max_tokens >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("max_tokens must be >= 1 (got ", max_tokens, ")"));
}

absl::StatusOr<SamplingParams> NormalizeSampling(SamplingParams params) {
  // Proto3 cannot tell an unset float from 0, and top_p = 0 would exclude every token, so 0
  // is read as "unset" (= no nucleus restriction).
  if (params.top_p == 0.f) params.top_p = 1.f;
  if (absl::Status s = ValidateSamplingParams(params); !s.ok()) return s;
  return params;
}

absl::Status ValidatePromptIds(absl::Span<const int32_t> ids, const ModelLimits& limits) {
  if (ids.empty()) return absl::InvalidArgumentError("prompt is empty after tokenisation");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token id ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ",
                                                     limits.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLengths(int64_t prompt_len, int32_t max_tokens, const ModelLimits& limits) {
  if (prompt_len > limits.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("prompt has ", prompt_len,
                                                   " tokens, more than the model's context length ",
                                                   limits.context_length));
  }
  if (prompt_len + max_tokens > limits.context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt_len, " tokens) + max_tokens (", max_tokens, ") = ",
        prompt_len + max_tokens, " exceeds the model's context length ", limits.context_length));
  }
  return absl::OkStatus();
}

}  // namespace tandem
