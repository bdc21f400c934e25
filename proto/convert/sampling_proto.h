// The one conversion between SamplingParams (model/sampling.h) and tandem.v1.SamplingParams.
#pragma once

#include "model/sampling.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

// An unset top_p becomes 1 (no nucleus restriction); a set one is taken as given, 0 included,
// so ValidateSamplingParams rejects it. Values are not validated here.
[[nodiscard]] SamplingParams FromProto(const v1::SamplingParams& proto);
// Sets every field, top_p included.
[[nodiscard]] v1::SamplingParams ToProto(const SamplingParams& params);

}  // namespace tandem
