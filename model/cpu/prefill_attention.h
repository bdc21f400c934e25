// Prefill attention as GEMMs: for requests with many query rows in one call, attention over the
// rank's locally owned tokens (DCP-aware, causal on global positions — the same contract as
// attention/cpu/paged_attention.h) is computed per (request, KV head) as S = Q·Kᵀ and O = P·V
// with oneDNN, after gathering the request's K and V from the paged pool. The dot-product kernel
// reaches ~90 GFLOP/s on prefill, oneDNN's GEMMs ~300; causal masking wastes at most one row
// chunk's worth of scores.
//
// The CPU backend calls RunGemmPrefillAttention for the rows it marks; every other row goes
// through PagedAttention. Not thread-safe per call (uses the calling thread's scratch and
// OpenMP team).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "attention/attention_args.h"

namespace tandem::cpu {

// Requests with at least this many rows (non-padding) in a call take the GEMM path.
inline constexpr int64_t kGemmAttentionMinRows = 16;

// Row indices of `rows` grouped by request, for requests with >= kGemmAttentionMinRows rows;
// empty when none qualifies.
std::vector<std::vector<int64_t>> GemmAttentionGroups(const AttentionRows& rows);

// Writes out/lse (layouts as PagedAttention) for exactly the rows listed in `groups`.
// REQUIRES: ValidateAttentionCall(pool, layer, rows, num_q_heads) is OK.
absl::Status RunGemmPrefillAttention(const KvPoolView& pool, int32_t layer,
                                     const AttentionRows& rows,
                                     const std::vector<std::vector<int64_t>>& groups,
                                     const float* q, int32_t num_q_heads, float scale, float* out,
                                     float* lse);

}  // namespace tandem::cpu
