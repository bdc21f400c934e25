// The OpenAI response of a request with n > 1 (docs/router.md#n-choices-from-one-prefill): what
// RunGenerate delivers — GeneratedTokens naming their choice, a ChoiceEnded per choice, then
// GenerateDone —
// becomes a `choices` array of n (stream: false) or chunks whose choice carries its `index`, in
// the order the decode node interleaved the choices' tokens (stream: true; chat: one role chunk
// per choice first, each choice's finish_reason chunk when it ends).
//
// Per choice, as the one-choice response does it: stop strings (a match ends that choice's text;
// the request is cancelled once every choice has ended), logprobs, and, with tools offered, the
// tool calls parsed from its text (ids "call_<id>-<index>_<i>"). usage.completion_tokens counts
// every choice's tokens the client was given.
//
// Thread-safety: one per request, used by RunGenerate one event at a time (on its thread, or on
// gRPC's while it waits: router/decode_call.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/cancellation.h"
#include "model/tokenizer/tokenizer.h"
#include "router/generate_driver.h"
#include "router/http/openai_logprobs.h"
#include "router/http/openai_request.h"
#include "router/http/openai_response.h"
#include "router/http/stop_matcher.h"
#include "serving/http_server.h"

namespace tandem {

class OpenAiChoicesSink : public GenerateSink {
 public:
  // REQUIRES: request.n > 1.
  OpenAiChoicesSink(HttpExchange& exchange, const OpenAiRequest& request, CompletionMeta meta,
                    HttpExchange::Headers headers, CancellationToken& cancel,
                    const Tokenizer& tokenizer);

  void Prefilled(int32_t cached_tokens) override { cached_tokens_ = cached_tokens; }
  void OnProvenance(const Provenance& provenance) override;
  void OnToken(GeneratedToken token) override;
  void OnChoiceEnd(ChoiceEnded end) override;
  void OnDone(GenerateDone done) override;
  // After RunGenerate returned `status`: writes the end of the response.
  void Finish(const absl::Status& status, int32_t prompt_tokens);

 private:
  struct Choice {
    int32_t index = 0;
    StopMatcher stop;
    std::optional<LogprobsBuilder> logprobs;
    int32_t tokens = 0;         // given to the client
    std::string text;           // stream: false, the whole text; with tools, the whole text too
    std::string held;           // stream with tools: text from where a call may begin
    std::string finish_reason;  // set when the choice ended
    bool closed = false;        // stream: its finish chunk was written
  };
  // The choice `index` while it still takes text; nullptr for an index out of range or a choice
  // already ended (by a stop string, it goes on generating until the request ends).
  Choice* Live(int32_t index);
  // After `c` took text or its end: its finish reason once it has one, and its close (stream).
  void Ended(Choice& c);
  // Text of `c` now safe to send.
  void Emit(Choice& c, const std::string& text);
  // Stream: the end of `c` (held tool text, pending logprobs, the finish chunk).
  void Close(Choice& c);
  bool AllEnded() const;
  std::string TakeLogprobs(Choice& c);
  std::string ToolIdPrefix(const Choice& c) const;
  void StartStream();
  void Write(absl::string_view data);
  void Fail(const absl::Status& status);
  HttpExchange::Headers Headers() const;

  HttpExchange& exchange_;
  const OpenAiRequest& request_;
  const CompletionMeta meta_;
  const HttpExchange::Headers headers_;
  CancellationToken& cancel_;
  const bool tools_;
  std::vector<Choice> choices_;
  std::optional<GenerateDone> final_;
  int32_t cached_tokens_ = 0;
  std::string provenance_;  // ProvenanceJson of the latest OnProvenance
  bool started_ = false;
  bool client_gone_ = false;
};

}  // namespace tandem
