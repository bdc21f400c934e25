// Pure checks the UCX engine runs before touching the network (std + abseil + layout math).
//
//   ValidateTransferMetadata: a source's metadata is well formed (INVALID_ARGUMENT naming the
//     field: "ranks[2].rkey is empty"), including the shape of each packed rkey
//     (ValidatePackedRkeyShape).
//   CheckHandshake: ValidateTransferMetadata, then the compatibility hash must equal the one
//     this decode instance expects (FAILED_PRECONDITION naming both hashes and the source). Run
//     once per (engine id, epoch), never per token.
//   ValidateCopies: every planned copy lies inside the source rank's pool and the local pool
//     (INVALID_ARGUMENT naming the copy index); nothing is posted unless all copies pass.
//   ValidatePull: what every KvPuller implementation checks before a pull — the metadata, the
//     pull options (max_in_flight >= 1, stall_timeout > 0) and the copies.
// Thread-safety: free functions over their arguments.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kv_transfer/kv_puller.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

[[nodiscard]] absl::Status ValidateTransferMetadata(const TransferMetadata& metadata);

// UCX 1.13 packs an rkey as: uint64 memory-domain map, uint8 memory type, then for every set bit
// of the map a uint8 length and that many bytes, then optional trailing device distances.
// ucp_ep_rkey_unpack takes no length, and in 1.13.1 a failed unpack crashes inside UCX's own
// cleanup (ucp_rkey_destroy on the half-built key), so a buffer whose entries run past its end
// must never reach it. INVALID_ARGUMENT "... truncated ..." when they do. Garbled bytes of a
// plausible shape are caught by the wire checksum (metadata_proto.h), not here.
[[nodiscard]] absl::Status ValidatePackedRkeyShape(absl::string_view rkey);

[[nodiscard]] absl::Status CheckHandshake(uint64_t expected_compat_hash,
                                          const TransferMetadata& metadata);

// REQUIRES: ValidateTransferMetadata(source) is OK.
[[nodiscard]] absl::Status ValidateCopies(absl::Span<const TransferCopy> copies,
                                          const TransferMetadata& source, int64_t local_pool_bytes);

[[nodiscard]] absl::Status ValidatePull(const TransferMetadata& source,
                                        absl::Span<const TransferCopy> copies,
                                        int64_t local_pool_bytes, const PullOptions& options);

}  // namespace tandem
