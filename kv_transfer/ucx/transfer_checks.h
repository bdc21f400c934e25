// Pure checks the UCX engine runs before touching the network (std + abseil + layout math).
//
//   ValidateTransferMetadata: a source's metadata is well formed (INVALID_ARGUMENT naming the
//     field: "ranks[2].rkey is empty").
//   CheckHandshake: ValidateTransferMetadata, then the compatibility hash must equal the one
//     this decode instance expects (FAILED_PRECONDITION naming both hashes and the source). Run
//     once per (engine id, epoch), never per token.
//   ValidateCopies: every planned copy lies inside the source rank's pool and the local pool
//     (INVALID_ARGUMENT naming the copy index); nothing is posted unless all copies pass.
// Thread-safety: free functions over their arguments.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

[[nodiscard]] absl::Status ValidateTransferMetadata(const TransferMetadata& metadata);

[[nodiscard]] absl::Status CheckHandshake(uint64_t expected_compat_hash,
                                          const TransferMetadata& metadata);

// REQUIRES: ValidateTransferMetadata(source) is OK.
[[nodiscard]] absl::Status ValidateCopies(absl::Span<const TransferCopy> copies,
                                          const TransferMetadata& source, int64_t local_pool_bytes);

}  // namespace tandem
