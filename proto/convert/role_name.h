// The one name of each node role (v1::InstanceRole) in logs, errors and the CLI's tables:
// "prefill", "decode", or "unspecified" for any other value.
#pragma once

#include "absl/strings/string_view.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

absl::string_view RoleName(v1::InstanceRole role);

}  // namespace tandem
