// The conversions between tandem.v1.KvHandle and KvHandle (kv/kv_handle.h): to the wire as a
// prefill node answers a Prefill, from it as a decode node receives it in a DecodeRequest.
#pragma once

#include "absl/status/statusor.h"
#include "kv/kv_handle.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

// Strict on the layout: INVALID_ARGUMENT as FromProto(v1::KvLayout, kPrefill) says (a handle
// names the prefill instance's layout); every other field is copied as it is.
[[nodiscard]] absl::StatusOr<KvHandle> KvHandleFromProto(const v1::KvHandle& p);
// Every field as it is (the lease expiry in whole Unix milliseconds).
v1::KvHandle ToProto(const KvHandle& kv);

}  // namespace tandem
