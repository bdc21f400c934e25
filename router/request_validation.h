// Validation of Router.Generate requests, producing the exact status the client receives
// (docs/design.md#error-codes: bad input gets a precise status, never a crash). Pure functions;
// thread-safe.
// The token-id, budget and length checks are common/request_checks.h, shared with the nodes.
//
// The router checks in this order, returning the first failure:
//   1. ValidateModelName      NOT_FOUND when the request names a model this router does not serve
//   2. ValidatePromptInput    INVALID_ARGUMENT: no prompt, empty prompt, unknown chat role
//   3. ValidateMaxTokens      INVALID_ARGUMENT: max_tokens < 1
//   4. ValidateSamplingParams INVALID_ARGUMENT: temperature < 0 / NaN / inf, top_k < 0,
//      (model/sampling.h)     top_p outside (0, 1] (an unset top_p is 1; an explicit 0 fails),
//                             min_p, penalties, logit_bias values, min_tokens, logprobs out of
//                             range (each message names its field)
//   5. ValidateSamplingForModel INVALID_ARGUMENT: a logit_bias or stop_token_ids id outside the
//                             vocabulary; min_tokens > max_tokens
//   -- the prompt is tokenised --
//   6. ValidatePromptIds      INVALID_ARGUMENT: empty, id < 0 or >= vocab_size (names id +
//                             position)
//   7. ValidateLengths        INVALID_ARGUMENT: prompt longer than the context, or
//                             prompt + max_tokens beyond it
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/sampling.h"
#include "model/tokenizer/chat.h"

namespace tandem {

// What the router knows about the model it serves (read once from the model file).
struct ModelLimits {
  std::string name;            // served model name
  int32_t vocab_size = 0;      // valid ids are [0, vocab_size)
  int64_t context_length = 0;  // positions the model supports: prompt + generated <= this
};

// The prompt as the client gave it, before tokenisation.
struct PromptInput {
  enum class Kind { kUnset, kText, kTokenIds, kChat };
  Kind kind = Kind::kUnset;
  std::string text;                // kText
  std::vector<int32_t> token_ids;  // kTokenIds
  std::vector<ChatMessage> chat;   // kChat
  // kChat: open the assistant's turn; or (vLLM's continue_final_message, not with
  // add_generation_prompt) leave the last message open for the model to continue.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // kChat: the OpenAI `tools` array as JSON text, passed to a chat template that renders tools
  // (chat_formatter.h); empty: `tools` is None.
  std::string tools_json;
};

// `requested` empty means "the default model" and always passes.
[[nodiscard]] absl::Status ValidateModelName(absl::string_view requested,
                                             const ModelLimits& limits);

[[nodiscard]] absl::Status ValidatePromptInput(const PromptInput& prompt);

[[nodiscard]] absl::Status ValidateMaxTokens(int32_t max_tokens);

// `stop_token_ids`: the client's extra stop ids (GenerateRequest.stop_token_ids).
[[nodiscard]] absl::Status ValidateSamplingForModel(const SamplingParams& sampling,
                                                    absl::Span<const int32_t> stop_token_ids,
                                                    int32_t max_tokens, const ModelLimits& limits);

[[nodiscard]] absl::Status ValidatePromptIds(absl::Span<const int32_t> ids,
                                             const ModelLimits& limits);

// The KV of prompt + generated tokens must fit the context: prompt_len + max_tokens <= context.
[[nodiscard]] absl::Status ValidateLengths(int64_t prompt_len, int32_t max_tokens,
                                           const ModelLimits& limits);

}  // namespace tandem
