// The one translation between absl::Status and grpc::Status (STYLE.md "Errors"). Codes map 1:1
// (both follow google.rpc.Code); messages are kept.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tandem {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tandem
