// What RunGenerate (generate_driver.h) delivers to its GenerateSink, as plain structs: the gRPC
// service turns them into GenerateResponse messages (generate_reactor.cc), the HTTP API into
// OpenAI JSON without any protobuf in between.
//
// Order: the tokens (with n > 1, each choice's GeneratedTokens and its ChoiceEnded once it is
// done, interleaved), then GenerateDone when the request succeeded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/logprobs.h"

namespace tandem {

struct GeneratedToken {
  int32_t id = 0;
  std::string text;    // text newly completed by this token (may be empty mid-character)
  int32_t index = 0;   // 0-based position in its choice's generated sequence
  int32_t choice = 0;  // n > 1: the choice it belongs to
  std::optional<TokenLogprobs> logprobs;  // when the request asked for them
};

// n > 1: one choice has ended.
struct ChoiceEnded {
  int32_t choice = 0;
  std::string finish_reason;  // "stop" | "length"
  std::string text_tail;      // text of this choice the detokenizer held back
  int32_t completion_tokens = 0;
};

struct GenerateDone {
  std::string finish_reason;  // "stop" | "length" (n > 1: choice 0's)
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // n > 1: all choices'
  int32_t cached_tokens = 0;      // of prompt_tokens, those the prefix cache served
  std::string request_id;
  std::string text_tail;           // n = 1: text the detokenizer held back
  int32_t retries = 0;             // node failures the router recovered from
  std::optional<int64_t> ttft_us;  // none when no token was sent
  int64_t total_us = 0;
};

}  // namespace tandem
