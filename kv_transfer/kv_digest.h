// KV digests (docs/kv_transfer.md "Provable KV"): what lets a decode instance prove that the
// KV it pulled is the KV the prefill wrote, for this request, under this lease. Pure: std +
// abseil + kv_transfer_core.
//
// Unit. One digest per (source rank r, block table index i, local KV head h): the head slab of
// virtual block i in rank r's pool, restricted to its *prompt bytes* — in each (layer, K|V) row
// the first `used` slots, where `used` is how many of the prompt's tokens rank r's DCP rank
// owns in that virtual block (B for a full block). Why this unit: whatever the two layouts (TP,
// PCP, DCP, block size, interleave), the planner reads each source head slab of a block from
// one source replica per destination DCP group and splits it only by token (DCP) or head
// range, so the copies of one destination DCP group always cover a unit's prompt bytes
// completely or not at all; slots past the prompt (read only when a last block is copied as a
// whole slab) never reach a decode step and are left out on both sides.
//
// Value. CRC32C (crc32c.h) seeded with the binding — request id, lease generation, source
// rank, block id, the block's generation, head — then over the unit's prompt bytes in source
// byte order. A digest of one lease's blocks therefore never verifies another lease's, nor the
// same block after it was freed and reused (its generation moved).
//
// Verification (VerifyKvDigests, or VerifyKvDigestRange per landed range of blocks) runs on the
// decode side once the bytes it reads have landed: per
// destination DCP group, the pieces of that group's copies inside each unit are put back in
// source order and their bytes read from the destination pools, so every destination copy of a
// prompt byte is checked (replicas included). Thread-safe (no shared state); large inputs are
// split over up to `threads` threads (units are independent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kv_transfer/copy_crcs.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

// What a set of digests is bound to: one lease of one request on the prefill instance.
struct KvDigestBinding {
  absl::string_view request_id;
  uint64_t lease_generation = 0;
  absl::Span<const int32_t> block_table;         // the prefill's virtual block ids
  absl::Span<const uint32_t> block_generations;  // parallel to block_table
};

// Units for a prompt of num_tokens under `src`: world · VirtualBlocksFor(num_tokens) · heads per
// rank. Unit (r, i, h) is element KvDigestIndex(...) of a digest vector.
int64_t KvDigestCount(const KvLayout& src, int64_t num_tokens);
int64_t KvDigestIndex(const KvLayout& src, int64_t num_tokens, int32_t rank, int64_t table_index,
                      int32_t head);

// Threads the nodes give ComputeKvDigests / VerifyKvDigests: the hardware's, at most 8. Both
// functions use at most one thread per 16 MiB of bytes to CRC (the calling thread included).
int32_t DefaultKvDigestThreads();

// A block's *checks*: Crc32c(0, ·) of each of its units' bytes, unbound — one per (rank, head),
// rank-major (index r · heads + h). A unit's digest is Crc32cCombine(seed, check, its length),
// so checks recorded when a full block was written (the prefix cache keeps them) bind to any
// later request without reading the block again, and a block corrupted since no longer matches.
using KvBlockChecks = std::vector<uint32_t>;

// The checks of full virtual block `block` read from `pools` (as ComputeKvDigests).
// INVALID_ARGUMENT for pools.size() != world or a block outside a pool.
[[nodiscard]] absl::StatusOr<KvBlockChecks> ComputeKvBlockChecks(
    const KvLayout& src, absl::Span<const absl::Span<const std::byte>> pools, int32_t block);

// The prefill side: digests of every unit, read from `pools` (pools[r] = rank r's pool, from
// its base). INVALID_ARGUMENT for pools.size() != world, a binding whose tables are shorter than
// the prompt needs or of different lengths, or a block whose bytes lie outside its pool.
//
// known[i], when i < known.size() and non-empty, are the checks of table index i recorded
// earlier: its units are bound from them and its bytes not read (INVALID_ARGUMENT when block i
// is not full in this prompt or the count is not world · heads). checks_out, when given, gets
// one entry per table index of the prompt: the checks of each full block (known or computed),
// empty for a partial last block.
[[nodiscard]] absl::StatusOr<std::vector<uint32_t>> ComputeKvDigests(
    const KvLayout& src, absl::Span<const absl::Span<const std::byte>> pools, int64_t num_tokens,
    const KvDigestBinding& binding, int32_t threads = 1, absl::Span<const KvBlockChecks> known = {},
    std::vector<KvBlockChecks>* checks_out = nullptr);

// One unit whose pulled bytes did not match.
struct KvDigestMismatch {
  int32_t src_rank = 0;
  int64_t table_index = 0;
  int32_t block = 0;  // source block id
  uint32_t block_generation = 0;
  int32_t head = 0;                // local head on the source rank
  std::vector<int32_t> dst_ranks;  // the destination ranks holding the bad bytes
};

// The decode side: checks the bytes `plan` (PlanKvTransfer of the whole prompt, src → dst) put
// into `dst_pools` (dst_pools[d] = destination rank d's pool) against `digests`. OK when every
// unit read matches. Errors: INVALID_ARGUMENT when digests.size() != KvDigestCount, the binding
// is malformed (as ComputeKvDigests), or dst_pools.size() != plan.copies.size(); INTERNAL when
// a destination DCP group's copies cover a unit's prompt bytes partly or twice (a planner the
// unit definition above does not fit) or fewer prompt bytes than the group holds (a truncated
// plan: every prompt byte a destination will read is checked, or the call fails); DATA_LOSS naming
// the first bad unit (source rank, block, generation, head, destination ranks) and how many were
// bad. Every bad unit is appended to *mismatches when given.
[[nodiscard]] absl::Status VerifyKvDigests(const KvLayout& src, const KvLayout& dst,
                                           const TransferPlan& plan, int64_t num_tokens,
                                           const KvDigestBinding& binding,
                                           absl::Span<const uint32_t> digests,
                                           absl::Span<const absl::Span<const std::byte>> dst_pools,
                                           std::vector<KvDigestMismatch>* mismatches = nullptr,
                                           int32_t threads = 1);

// VerifyKvDigests restricted to the units of table indices [table_begin, table_end) — what a
// decode node checks as soon as those blocks have landed while later ones are still in flight
// (docs/kv_transfer.md "Provable KV"). `plan` is still the whole prompt's plan (only its pieces in
// the range are read); every destination DCP group must have read all the range's prompt bytes
// (INTERNAL otherwise). Verifying [0, b) and [b, e) accepts exactly what [0, e) accepts.
// INVALID_ARGUMENT for a range not inside [0, VirtualBlocksFor(num_tokens)] (an empty range
// checks nothing but the arguments).
//
// landed, when given: CRCs a puller computed while it copied (KvDigestCrcRequests, LandedCrcs) —
// a part of a unit found there (same destination rank and offset, not longer than the part) is
// combined from its CRC instead of read from the pool; the rest is read. Same verdicts.
class LandedCrcs;
using LandedCrcList = std::vector<std::shared_ptr<const LandedCrcs>>;
[[nodiscard]] absl::Status VerifyKvDigestRange(
    const KvLayout& src, const KvLayout& dst, const TransferPlan& plan, int64_t num_tokens,
    const KvDigestBinding& binding, absl::Span<const uint32_t> digests,
    absl::Span<const absl::Span<const std::byte>> dst_pools, int64_t table_begin, int64_t table_end,
    std::vector<KvDigestMismatch>* mismatches = nullptr, int32_t threads = 1,
    const LandedCrcList* landed = nullptr);

// The check fused into the copy (copy_crcs.h). KvDigestCrcRequests: for pulling `plan` (the
// prompt's plan or any range plan of it, PlanKvTransferRange), each destination rank's copies
// split into the parts the check reads — at the source's head-slab boundaries and, in a block
// the prompt ends inside, at each row's prompt bytes — as spans for PullOptions::copy_crcs.
// Bytes outside the prompt's blocks get no span. INVALID_ARGUMENT for a block table shorter
// than the prompt needs.
[[nodiscard]] absl::StatusOr<std::vector<CopyCrcs>> KvDigestCrcRequests(
    const KvLayout& src, const TransferPlan& plan, int64_t num_tokens,
    absl::Span<const int32_t> block_table);

// The CRCs pullers computed, by destination (rank, offset of the span's first byte). Filled
// once after a pull (Add), then read only (thread-safe to share).
class LandedCrcs {
 public:
  struct Span {
    int64_t length = 0;
    uint32_t crc = 0;
  };
  // Records the computed spans of `crcs`, the requests of `copies` (one destination rank's).
  void Add(int32_t dst_rank, absl::Span<const TransferCopy> copies, const CopyCrcs& crcs);
  const Span* Find(int32_t dst_rank, int64_t dst_offset) const;
  int64_t bytes() const { return bytes_; }  // bytes the recorded spans cover

 private:
  std::vector<absl::flat_hash_map<int64_t, Span>> by_rank_;
  int64_t bytes_ = 0;
};

}  // namespace tandem
