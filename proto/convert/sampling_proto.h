// The one conversion between SamplingParams (model/sampling.h) and tandem.v1.SamplingParams.
#pragma once

#include "model/logprobs.h"
#include "model/sampling.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

// An unset top_p or repetition_penalty becomes 1 (off); a set one is taken as given, 0 included,
// so ValidateSamplingParams rejects it. An unset logprobs becomes -1 (none). logit_bias comes out
// sorted by token id. Values are not validated here.
[[nodiscard]] SamplingParams FromProto(const v1::SamplingParams& proto);
// Sets every field, top_p and repetition_penalty included (logprobs only when >= 0).
[[nodiscard]] v1::SamplingParams ToProto(const SamplingParams& params);

// TokenLogprobs (model/logprobs.h) <-> tandem.v1.TokenLogprobs; top_ids and top_logprobs pair up
// (a longer list is cut to the shorter one's length).
[[nodiscard]] v1::TokenLogprobs ToProto(const TokenLogprobs& logprobs);
[[nodiscard]] TokenLogprobs FromProto(const v1::TokenLogprobs& proto);

}  // namespace tandem
