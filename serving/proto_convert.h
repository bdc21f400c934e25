// Conversions between Tandem's domain types and their tandem.v1 protobuf messages, shared by the
// prefill and decode services (the router uses the same messages).
#pragma once

#include "absl/status/statusor.h"
#include "attention/parallel_layout.h"
#include "kv_transfer/transfer_types.h"
#include "model/sampling.h"
#include "tandem/v1/common.pb.h"
#include "tandem/v1/kv_transfer.pb.h"

namespace tandem {

v1::KvLayout ToProto(const KvLayout& layout);
// INVALID_ARGUMENT for an unknown dtype (the layout itself is validated by the caller).
absl::StatusOr<KvLayout> FromProto(const v1::KvLayout& proto);

// top_p = 0 means "unset" and becomes 1. Values are not validated here.
SamplingParams FromProto(const v1::SamplingParams& proto);
v1::SamplingParams ToProto(const SamplingParams& params);

}  // namespace tandem
