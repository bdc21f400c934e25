// The `logprobs` object of OpenAI responses (as vLLM fills it), built from the TokenLogprobs the
// nodes send with each token (model/logprobs.h: the model's raw distribution, f32 log-softmax of
// the logits before any sampling parameter). Pure; not thread-safe (one per request).
//
//   chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
//                 "logprob", "bytes"}]}]}
//   completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}],
//                 "text_offset": [...]}
// A token's string is its decoded text (U+FFFD for part of a UTF-8 character, as vLLM); `bytes`
// are its raw bytes. text_offset is where the token's text starts in the generated text, in
// characters (code points), as Python's len() counts them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/logprobs.h"
#include "model/tokenizer/tokenizer.h"
#include "router/http/openai_request.h"

namespace tandem {

class LogprobsBuilder {
 public:
  // `tokenizer` must outlive this object.
  LogprobsBuilder(OpenAiEndpoint endpoint, const Tokenizer& tokenizer);

  // Appends generated token `id` with its log-probabilities; `text` is the text the token
  // completed (TokenChunk.text), which advances text_offset.
  void Add(int32_t id, const TokenLogprobs& logprobs, const std::string& text);
  // Whether tokens were added since the last Take.
  bool pending() const { return count_ > 0; }
  // The logprobs object of the tokens added since the last Take (an empty one when none), and
  // starts a new one: a stream sends each chunk's tokens, a whole response all of them.
  nlohmann::json Take();

 private:
  nlohmann::json Empty() const;

  const OpenAiEndpoint endpoint_;
  const Tokenizer& tokenizer_;
  nlohmann::json current_;
  int count_ = 0;
  int64_t text_offset_ = 0;  // code points generated so far
};

}  // namespace tandem
