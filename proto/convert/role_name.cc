#include "proto/convert/role_name.h"

namespace tandem {

absl::string_view RoleName(v1::InstanceRole role) {
  switch (role) {
    case v1::INSTANCE_ROLE_PREFILL:
      return "prefill";
    case v1::INSTANCE_ROLE_DECODE:
      return "decode";
    default:
      return "unspecified";
  }
}

}  // namespace tandem
