#include "router/request_validation.h"

#include "absl/strings/str_cat.h"
#include "common/request_checks.h"

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
        if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
          return absl::InvalidArgumentError(absl::StrCat(
              "chat message ", i, " has role '", role, "' (valid: system, user, assistant, tool)"));
        }
      }
      if (prompt.continue_final_message && prompt.add_generation_prompt) {
        return absl::InvalidArgumentError(
            "chat.continue_final_message and chat.add_generation_prompt cannot both be true");
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown prompt kind");
}

absl::Status ValidateMaxTokens(int32_t max_tokens) {
  return CheckTokenBudget(max_tokens, "max_tokens");
}

absl::Status ValidateSamplingForModel(const SamplingParams& sampling,
                                      absl::Span<const int32_t> stop_token_ids, int32_t max_tokens,
                                      const ModelLimits& limits) {
  if (absl::Status s = ValidateSamplingIds(sampling, limits.vocab_size); !s.ok()) return s;
  for (const int32_t id : stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop_token_ids: token id ", id, " is out of vocabulary (size ", limits.vocab_size, ")"));
    }
  }
  if (sampling.min_tokens > max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens (", sampling.min_tokens,
                                                   ") must be <= max_tokens (", max_tokens, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePromptIds(absl::Span<const int32_t> ids, const ModelLimits& limits) {
  if (ids.empty()) return absl::InvalidArgumentError("prompt is empty after tokenisation");
  return CheckTokenIds(ids, limits.vocab_size, "prompt");
}

absl::Status ValidateLengths(int64_t prompt_len, int32_t max_tokens, const ModelLimits& limits) {
  return CheckContextFit(prompt_len, max_tokens, "max_tokens", limits.context_length);
}

}  // namespace tandem
