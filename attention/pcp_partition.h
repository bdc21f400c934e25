// Prefill context parallelism partition (docs/design.md#pcp-partition). Pure.
//
// A request whose forward pass covers q tokens is cut into 2·pcp chunks of ceil(q/(2·pcp))
// tokens (the tail chunks may be short or empty); PCP rank c computes chunks c and 2·pcp−1−c,
// which balances causal-attention work. Empty chunks are dropped.
//
// Rows of a batch are numbered in "batch order": request 0's tokens, then request 1's, ... A
// rank's rows are in "rank order": for each request, its first chunk then its second.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tandem {

struct PcpPartition {
  int32_t pcp = 1;
  // gather[c][i] = batch-order row of rank c's i-th row.
  std::vector<std::vector<int64_t>> gather;
  // For each batch-order row: which rank computes it and where in that rank's rows.
  std::vector<int32_t> owner_rank;
  std::vector<int64_t> row_in_rank;

  int64_t max_rows_per_rank() const;
  // restore[i] = owner_rank[i]·stride + row_in_rank[i]: the index of batch row i in the
  // concatenation of every rank's rows when rank c's rows start at c·stride (an all-gather with
  // each rank padded to `stride` rows). stride >= max_rows_per_rank().
  std::vector<int64_t> RestoreIndex(int64_t stride) const;
};

// REQUIRES: pcp >= 1, every length >= 0.
PcpPartition PartitionForPcp(absl::Span<const int64_t> lengths, int32_t pcp);

}  // namespace tandem
