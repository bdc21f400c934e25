// The one conversion between FinishReason (common/finish_reason.h) and tandem.v1.FinishReason.
#pragma once

#include "absl/status/statusor.h"
#include "common/finish_reason.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

[[nodiscard]] v1::FinishReason ToProto(FinishReason reason);

// INVALID_ARGUMENT for FINISH_REASON_UNSPECIFIED (an unset field) and values this build does
// not know.
[[nodiscard]] absl::StatusOr<FinishReason> FromProto(v1::FinishReason proto);

}  // namespace tandem
