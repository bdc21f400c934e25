// DecodeSink: where a decode node's request sends its events — DecodeNode::Start /
// StartChoices (one sink per choice) and the colocated prefill (ColocatedPrefill::Start) alike.
// Called from the engine thread; must not block for long. on_done is called exactly once.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "common/finish_reason.h"
#include "model/logprobs.h"

namespace tandem {

struct DecodeSink {
  std::function<void(int32_t token)> on_token;
  std::function<void(absl::Status status, FinishReason reason, int32_t generated)> on_done;
  // Optional; with sampling.logprobs >= 0, called just before on_token with that token's
  // log-probabilities (not for a resumed call's known first token; a pipelined call's first
  // token has the prefill's, from its final progress message; a colocated call's first token
  // has its prefill's).
  std::function<void(const TokenLogprobs& logprobs)> on_logprobs;
};

}  // namespace tandem
