// vLLM's POST /tokenize and POST /detokenize over the router's tokenizer (ServedModel), so a
// client can count and inspect the tokens a completion request would send to the nodes.
//
//   /tokenize   {model?, prompt | messages, add_special_tokens?, add_generation_prompt?,
//                truncate_prompt_tokens?, return_token_strs?}
//            -> {"count", "max_model_len", "tokens"[, "token_strs"]}
//   /detokenize {model?, tokens} -> {"prompt"}
//
// A body with `messages` is tokenised as /v1/chat/completions would, else `prompt` as
// /v1/completions would (ParseOpenAiRequest, TokenizeOpenAiPrompt: the same defaults, so `count`
// is the prompt_tokens of the same completion request, and the same fields are refused).
// Detokenize renders special tokens (as vLLM's, which decodes with the tokenizer's defaults).
// Errors: those of ParseOpenAiRequest, ValidateModelName (NOT_FOUND), ValidatePromptInput, and
// INVALID_ARGUMENT naming `tokens` for a token list that is not integers in the vocabulary.
// Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "router/served_model.h"

namespace tandem {

struct TokenizeAnswer {
  std::string body;                         // the JSON answer
  std::vector<std::string> unknown_fields;  // for LogUnknownFields
};

[[nodiscard]] absl::StatusOr<TokenizeAnswer> Tokenize(const ServedModel& model,
                                                      absl::string_view body);
[[nodiscard]] absl::StatusOr<TokenizeAnswer> Detokenize(const ServedModel& model,
                                                        absl::string_view body);

}  // namespace tandem
