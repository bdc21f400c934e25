// KV transfer planner (docs/design.md#transfer-planner): which byte ranges each destination rank
// reads from which source rank so that, afterwards, every destination pool holds exactly what the
// destination would have written had it computed the prompt itself. Pure function of the two
// layouts, the two block tables and the token count; no I/O. Thread-safe (no shared state).
//
// Defined by ownership sets: destination rank d needs every (KV head in its range, layer, K|V,
// token it owns under its own DCP placement) for tokens [0, num_tokens). Each such element lives
// on the source ranks that hold the head and own the token under the source placement; when
// several source replicas hold it (TP replication, several DCP groups, PCP copies) reads are
// spread deterministically: destination replica k of m starts at source replica k of n, and when
// n > m each destination splits the prompt into ceil(n/m) contiguous pieces of source virtual
// blocks read from replicas k, k+m, k+2m, … (mod n) — all sources busy, copies stay large.
//
// Granularity. A destination block whose B slots are exactly the B slots of one source block
// (same block size, same tokens in the same order) is copied as head slabs: one copy per source
// head range, merged across consecutive block ids. If the prompt ends inside such a block the
// whole slab is still copied: the slots past the prompt belong to the same request on both sides
// (allocated block, owned by the same ranks under both placements) and hold no data yet; the
// destination overwrites them when it decodes those positions. This keeps matched layouts at one
// copy per run of consecutive block ids instead of one per (head, layer, K|V) for the last block.
// Any other block is copied per (head, layer, K|V) row piece, one copy per token run
// (token_runs.h), never per token unless the placements interleave token by token.
//
// Byte offsets are from each rank's pool base (pool_layout.h). Cost: O(copies emitted + blocks ·
// log blocks); nothing is generated per element and merged afterwards.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

// OK iff KV bytes can move between the two layouts. INVALID_ARGUMENT when either layout is
// invalid on its own (message starts with "source layout" / "destination layout");
// FAILED_PRECONDITION when num_kv_heads, num_layers, head_dim or the KV dtype differ (message
// names the field and both values). Block size, interleave and tp/pcp/dcp may differ freely.
[[nodiscard]] absl::Status CheckKvCompatible(const KvLayout& src, const KvLayout& dst);

// Plan for copying tokens [0, num_tokens) of one request. `src_blocks` / `dst_blocks` are the
// request's virtual block tables (shared by all ranks of an instance): VirtualBlocksFor(geometry,
// num_tokens) entries are used, more are allowed. Errors: CheckKvCompatible's; INVALID_ARGUMENT
// for num_tokens < 0, a table shorter than needed, a negative or repeated block id among the used
// entries, or block ids whose byte offsets do not fit in int64.
// Result: copies.size() == dst.world(); copies[d] ascending by dst_offset, non-overlapping,
// adjacent copies (same source rank, contiguous on both sides) merged.
[[nodiscard]] absl::StatusOr<TransferPlan> PlanKvTransfer(const KvLayout& src,
                                                          absl::Span<const int32_t> src_blocks,
                                                          const KvLayout& dst,
                                                          absl::Span<const int32_t> dst_blocks,
                                                          int64_t num_tokens);

// Pipelined transfer (docs/kv_transfer.md): the part of PlanKvTransfer(…, num_tokens) that
// copies tokens [begin, end) of the prompt, for pulling a prompt chunk by chunk while its prefill
// still writes later chunks. Reads nothing of a token outside [begin, end): a block is copied as
// a whole slab (above) only when the range holds all of its prompt slots, else per token run —
// so the slots past the prompt are copied only when the final range holds the last block whole.
// Ranges that partition [0, num_tokens) together copy every prompt byte of the whole plan once,
// from the same source rank and offset (replicas are chosen by num_tokens, not by the range).
// Errors: PlanKvTransfer's (the tables are checked for num_tokens), and INVALID_ARGUMENT unless
// 0 <= begin <= end <= num_tokens. An empty range gives one empty copy list per rank.
[[nodiscard]] absl::StatusOr<TransferPlan> PlanKvTransferRange(
    const KvLayout& src, absl::Span<const int32_t> src_blocks, const KvLayout& dst,
    absl::Span<const int32_t> dst_blocks, int64_t num_tokens, int64_t begin, int64_t end);

}  // namespace tandem
