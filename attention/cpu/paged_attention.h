// CPU paged attention over one rank's KV pool, with LSE output (docs/design.md#kv-pool-layout,
// #rank-local-attention).
//
// Each query row belongs to a request and has a global position p. It attends to that request's
// tokens that THIS rank owns under DCP and whose global position is <= p (causal on global
// positions). Because a rank stores its tokens densely in position order, those are the local
// tokens j < LocalLen(p + 1), at slot SlotOfLocal(j) of the request's block table. The same
// kernel serves decode (one row per request) and prefill (many rows per request; the caller
// writes the chunk's K/V into the pool first — write-then-attend).
//
// GQA: q holds `num_q_heads` heads, all of them for the pool's local KV heads; query head h uses
// local KV head h / (num_q_heads / pool.geometry.num_kv_heads).
//
// Output per (row, head): o normalised over the local keys, and lse = natural-log
// log Σ exp(score) with score = scale·q·k. No local keys → lse = −inf and o = 0; so for a
// padding row (negative position, attention_args.h), whose request and table are never read.
// Accumulation is fp32 for every KV dtype.
//
// Threads: uses up to ThreadsForThisThread() threads (common/parallel_for.h). Reentrant.
// Vectorised for AVX-512 and AVX2 (chosen at run time, cpu_isa.h) when head_dim is a multiple
// of 16 resp. 8; any head_dim works on the portable path.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "attention/attention_args.h"

namespace tandem {

// Checks shapes, indices and that every row's block table covers its position and that block
// ids are inside the pool; INVALID_ARGUMENT naming the first problem otherwise. The kernel
// itself does not validate (it is on the hot path).
[[nodiscard]] absl::Status ValidateAttentionCall(const KvPoolView& pool, int32_t layer,
                                                 const AttentionRows& rows, int32_t num_q_heads);

// q, out: [num_rows][num_q_heads][head_dim] f32; lse: [num_rows][num_q_heads] f32.
// REQUIRES: ValidateAttentionCall(...) is OK.
// The output of a query head seeing no local key is zeros with lse −inf.
void PagedAttention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                    const float* q, int32_t num_q_heads, float scale, float* out, float* lse);

// Scatters K and V rows into the pool: for row i with slots[i] >= 0, writes k[i] and v[i]
// ([num_kv_heads][head_dim] f32 each, converted to the pool dtype, rounding to nearest even) at
// that slot in `layer`. Rows with slot −1 (owned by another DCP rank) are skipped. Distinct rows
// must have distinct slots. REQUIRES: ValidateKvCacheWrite(...) is OK.
void WriteKvCache(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t num_rows,
                  const float* k, const float* v);

// Checks the pool, the layer and that every slot is −1 or inside the pool; INVALID_ARGUMENT
// naming the first problem otherwise.
[[nodiscard]] absl::Status ValidateKvCacheWrite(const KvPoolView& pool, int32_t layer,
                                                const int64_t* slots, int64_t num_rows);

}  // namespace tandem
