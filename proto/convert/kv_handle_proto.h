// The one conversion from tandem.v1.KvHandle to KvHandle (kv/kv_handle.h), as a decode node
// receives it in a DecodeRequest.
#pragma once

#include "absl/status/statusor.h"
#include "kv/kv_handle.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

// Strict on the layout: INVALID_ARGUMENT as FromProto(v1::KvLayout, kPrefill) says (a handle
// names the prefill instance's layout); every other field is copied as it is.
[[nodiscard]] absl::StatusOr<KvHandle> KvHandleFromProto(const v1::KvHandle& p);

}  // namespace tandem
