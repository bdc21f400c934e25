// Token sampling from logits (pure), with vLLM's sampler semantics. Draw number `step` of a
// request is the token g[step] of its generated sequence; `step` tokens were generated before it.
//
// Order of operations (vLLM's V1 sampler), on a float32 copy of the model's logits:
//   1. min_tokens   while step < min_tokens, the ids in min_tokens_stop_ids get -inf
//   2. logit_bias   bias added to the token's logit
//   3. penalties    repetition_penalty on every id seen in the prompt or the output (a positive
//                   logit is divided by it, a negative one multiplied); then
//                   logit -= frequency_penalty * count_in_output + presence_penalty * [in output]
//   4. greedy       temperature == 0 (or top_k == 1): the largest processed logit
//   5. temperature  logits / T
//   6. min_p        tokens whose probability is below min_p * (the largest probability) dropped
//   7. top_k, top_p the k most likely, then the smallest prefix whose mass reaches top_p
//   8. draw         a counter-based generator: draw `step` depends only on (seed, step), so the
//                   same seed gives the same tokens whatever else is batched with the request,
//                   and a request resumed elsewhere continues its stream.
// "Prompt" and "output" are the request's own: on a resume the prompt a node prefills holds
// earlier generated tokens, which TokenHistory still counts as output (model/token_history.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tandem {

class TokenHistory;

inline constexpr int32_t kMaxLogprobs = 20;  // vLLM's default max_logprobs

struct SamplingParams {
  float temperature = 0.f;  // 0 = greedy
  int32_t top_k = 0;        // 0 = disabled
  float top_p = 1.f;        // in (0, 1]
  uint64_t seed = 0;
  float min_p = 0.f;               // in [0, 1]; 0 = disabled
  float repetition_penalty = 1.f;  // > 0; 1 = disabled
  float presence_penalty = 0.f;    // in [-2, 2]
  float frequency_penalty = 0.f;   // in [-2, 2]
  // (token id, bias) with bias in [-100, 100] (OpenAI's range; the router clamps as vLLM does).
  std::vector<std::pair<int32_t, float>> logit_bias;
  int32_t min_tokens = 0;  // >= 0: tokens generated before a stop id may be sampled
  // The ids min_tokens suppresses: the request's stop ids (EOS unless ignore_eos, and the client's
  // stop_token_ids), set by the router when min_tokens > 0.
  std::vector<int32_t> min_tokens_stop_ids;
  // -1: no log-probabilities; n in [0, kMaxLogprobs]: each sampled token's and the n most likely
  // tokens' (model/logprobs.h). Does not change which token is sampled.
  int32_t logprobs = -1;
  // Grammar-constrained decoding (docs/structured_output.md): GBNF text with a "root" rule; empty
  // = unconstrained. The router writes it from response_format / guided_* / tool_choice; the
  // nodes compile it (model/grammar/) and mask every draw with it (model/guided_sampling.h).
  std::string grammar;

  bool operator==(const SamplingParams&) const = default;
};

// INVALID_ARGUMENT naming the field for temperature < 0 (or not finite), top_k < 0,
// top_p outside (0, 1], min_p outside [0, 1], repetition_penalty <= 0 (or not finite),
// presence/frequency_penalty outside [-2, 2], a logit_bias outside [-100, 100] or with a negative
// id, min_tokens < 0, a negative min_tokens_stop_ids id, logprobs outside [-1, kMaxLogprobs].
[[nodiscard]] absl::Status ValidateSamplingParams(const SamplingParams& params);
// INVALID_ARGUMENT naming the field when a logit_bias or min_tokens_stop_ids id is >= vocab_size.
[[nodiscard]] absl::Status ValidateSamplingIds(const SamplingParams& params, int64_t vocab_size);

// True when sampling reads the request's token history (a penalty is set).
bool UsesPenalties(const SamplingParams& params);
// True when a node needs the ids of the request's context (prompt, then earlier generated
// tokens): for the penalties, or to replay a grammar's matcher over the generated ones.
bool NeedsContext(const SamplingParams& params);

// Index of the largest logit (lowest index on ties).
int32_t ArgMax(absl::Span<const float> logits);

// Steps 1-3 above: the logits the token is chosen from, before temperature.
// REQUIRES: history != nullptr when UsesPenalties(params); its output count is `step`.
std::vector<float> ProcessLogits(absl::Span<const float> logits, const SamplingParams& params,
                                 uint64_t step, const TokenHistory* history);

// Samples the token for draw number `step` of a request (steps 1-8 above).
// REQUIRES: ValidateSamplingParams(params).ok(), ValidateSamplingIds(params, logits.size()).ok(),
// logits non-empty; history != nullptr when UsesPenalties(params).
int32_t SampleToken(absl::Span<const float> logits, const SamplingParams& params, uint64_t step,
                    const TokenHistory* history = nullptr);

// Uniform double in [0, 1) for (seed, step).
double CounterUniform(uint64_t seed, uint64_t step);

}  // namespace tandem
