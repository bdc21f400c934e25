// KvChunkChecks: the prefill side of KV digests (docs/kv_transfer.md "Provable KV") computed as
// the engine writes each chunk's KV (PrefillJob::on_kv_written), not in one pass after the
// prompt (issue 28). Each block a chunk completes gets its checks (ComputeKvBlockChecks: the
// unbound CRC of each of its units) right then, while the chunk's KV is freshly written and
// before a pipelined prefill publishes the chunk; at the end, ComputeKvDigests binds them to the
// lease (Crc32cCombine, no read) and reads only the prompt's partial last block. Blocks from the
// prefix cache are not written by this prompt and carry checks of their own.
//
// Pure: kv_transfer_core. Thread-compatible: Written is called on the engine's scheduler thread;
// checks() is read after the prefill finished (the engine's completion happens after).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kv_transfer/kv_digest.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

class KvChunkChecks {
 public:
  // num_tokens: the prompt's length (blocks past it are never full here).
  KvChunkChecks(KvLayout layout, int64_t num_tokens);

  // The KV of prompt tokens [begin, end) was written into `blocks` (the prompt's block table)
  // in `pools` (pools[r] = source rank r's pool, from its base): computes the checks of every
  // block wholly written by now whose first token is at or after the first `begin` seen.
  // INVALID_ARGUMENT (ComputeKvBlockChecks) for a block outside a pool.
  [[nodiscard]] absl::Status Written(absl::Span<const absl::Span<const std::byte>> pools,
                                     absl::Span<const int32_t> blocks, int64_t begin, int64_t end);

  // Per table index: the checks computed so far (empty where none), for ComputeKvDigests' known.
  const std::vector<KvBlockChecks>& checks() const { return checks_; }
  int64_t blocks_checked() const { return blocks_checked_; }

 private:
  const KvLayout layout_;
  const int64_t num_tokens_;
  const int64_t block_tokens_;
  int64_t first_written_ = -1;  // first token this prompt wrote (the cached prefix is before it)
  int64_t next_block_ = 0;      // blocks [0, next_block_) are checked or not this prompt's
  std::vector<KvBlockChecks> checks_;
  int64_t blocks_checked_ = 0;
};

// Merges two per-table-index check lists (ComputeKvDigests' known): a's entry where non-empty,
// else b's.
std::vector<KvBlockChecks> MergeKnownChecks(std::vector<KvBlockChecks> a,
                                            const std::vector<KvBlockChecks>& b);

}  // namespace tandem
