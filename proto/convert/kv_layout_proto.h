// The one conversion between KvLayout and tandem.v1.KvLayout, used wherever a layout crosses the
// wire (KV handles, instance status, transfer metadata).
#pragma once

#include "absl/status/statusor.h"
#include "attention/parallel_layout.h"
#include "kv/kv_layout.h"
#include "tandem/v1/kv_transfer.pb.h"

namespace tandem {

[[nodiscard]] v1::KvLayout ToProto(const KvLayout& layout);

// Strict: INVALID_ARGUMENT when parallel or dims is missing, the dtype is unknown, or the layout
// is not valid for an instance of `role` (ValidateParallelConfig). Messages start with "layout".
[[nodiscard]] absl::StatusOr<KvLayout> FromProto(const v1::KvLayout& proto, InstanceRole role);

}  // namespace tandem
