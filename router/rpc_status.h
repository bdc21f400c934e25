// The router's one translation between absl::Status and grpc::Status (STYLE.md "Errors"). Both
// follow google.rpc.Code, so codes map 1:1 and messages are kept.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tandem {

grpc::Status StatusToGrpc(const absl::Status& status);
absl::Status StatusFromGrpc(const grpc::Status& status);

}  // namespace tandem
