// Pure checks the UCX engine runs before touching the network (std + abseil + layout math).
//
//   ValidateTransferMetadata: a source's metadata is well formed (INVALID_ARGUMENT naming the
//     field: "ranks[2].rkey is empty"), including the shape of each packed rkey
//     (ValidatePackedRkeyShape, under the layout of the UCX that will read it).
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

// Packed-rkey layouts, as UCX's ucp_rkey.c packs (ucp_rkey_pack_memh) and reads them
// (ucp_ep_rkey_unpack, which takes no length):
//   kEntries — UCX < 1.20 (Debian's 1.13): uint64 memory-domain map, uint8 memory type, then for
//     every set bit of the map a uint8 length and that many bytes. Device memory may add a
//     system device and distances after them, which an unpack without a length never reads.
//   kEntriesSysDevice — UCX >= 1.20 (PyPI's 1.22): the same entries, then, for a non-empty map,
//     a uint8 system device that 1.20+ always packs and always reads from a 1.20+ peer; unless it
//     is 0xFF (unknown: host memory), 3-byte distances (device id first, never 0xFF) follow up
//     to a 0xFF terminator, which the unpack reads up to with no bound.
// Both ends of a transfer link the same UCX (one build; docs/gpu.md), so the layout is that of
// the UCX this process linked (LinkedUcxRkeyLayout, remote_rank.h); a decode node on 1.20+ would
// refuse a source on an older UCX as truncated. kEntries is what every version packs first.
enum class PackedRkeyLayout { kEntries, kEntriesSysDevice };

// The layout UCX major.minor packs and reads.
PackedRkeyLayout PackedRkeyLayoutFor(uint32_t major, uint32_t minor);

// UCX reads a packed rkey without a length, and in 1.13.1 a failed unpack crashes inside UCX's
// own cleanup (ucp_rkey_destroy on the half-built key); 1.22 reads distances up to a terminator
// with no bound. So a buffer whose parts run past its end under `layout` must never reach UCX:
// INVALID_ARGUMENT "... truncated ..." when they do. Garbled bytes of a plausible shape are
// caught by the wire checksum (metadata_proto.h), not here.
[[nodiscard]] absl::Status ValidatePackedRkeyShape(
    absl::string_view rkey, PackedRkeyLayout layout = PackedRkeyLayout::kEntries);

// `rkeys`: the layout each rank's packed rkey is checked against (ValidatePackedRkeyShape).
[[nodiscard]] absl::Status ValidateTransferMetadata(
    const TransferMetadata& metadata, PackedRkeyLayout rkeys = PackedRkeyLayout::kEntries);

[[nodiscard]] absl::Status CheckHandshake(uint64_t expected_compat_hash,
                                          const TransferMetadata& metadata);

// REQUIRES: ValidateTransferMetadata(source) is OK.
[[nodiscard]] absl::Status ValidateCopies(absl::Span<const TransferCopy> copies,
                                          const TransferMetadata& source, int64_t local_pool_bytes);

[[nodiscard]] absl::Status ValidatePull(const TransferMetadata& source,
                                        absl::Span<const TransferCopy> copies,
                                        int64_t local_pool_bytes, const PullOptions& options,
                                        PackedRkeyLayout rkeys = PackedRkeyLayout::kEntries);

}  // namespace tandem
