// TransferMetadata ⇄ tandem.v1.TransferMetadata (proto/tandem/v1/kv_transfer.proto).
//
// ToProto also fills each rank's derived placement (KV head range, dcp_rank) and a checksum of
// its UCX fields. FromProto rejects anything a peer could have garbled before it reaches UCX:
// INVALID_ARGUMENT naming the field ("ranks[1].checksum does not match ...", "layout.dtype ...",
// "ranks[0].kv_head_begin ..."), then everything ValidateTransferMetadata checks.
// Thread-safety: free functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kv_transfer/transfer_types.h"
#include "tandem/v1/kv_transfer.pb.h"

namespace tandem {

// REQUIRES: ValidateTransferMetadata(metadata) is OK (placement is derived from the layout).
[[nodiscard]] v1::TransferMetadata ToProto(const TransferMetadata& metadata);
[[nodiscard]] absl::StatusOr<TransferMetadata> FromProto(const v1::TransferMetadata& proto);

[[nodiscard]] std::string SerializeTransferMetadata(const TransferMetadata& metadata);
[[nodiscard]] absl::StatusOr<TransferMetadata> ParseTransferMetadata(absl::string_view bytes);

}  // namespace tandem
