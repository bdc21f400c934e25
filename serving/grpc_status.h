// The one translation between absl::Status and grpc::Status (STYLE.md "Errors"). Codes map 1:1
// (both follow google.rpc.Code); messages are kept. Payloads (absl::Status::SetPayload, e.g.
// common/kv_source_failure.h's blame) travel in the gRPC status details
// (`grpc-status-details-bin`) as one JSON object, type URL -> payload text, and come back as the
// same payloads.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tandem {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tandem
