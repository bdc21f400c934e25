// DCP token ownership inside one DCP group (docs/design.md#token-ownership). Pure index math,
// host/device-callable.
//
// A DCP group of N ranks stores each token on exactly one rank. With block size B and
// interleave I (B % I == 0), the block table indexes *virtual* blocks of V = B·N tokens; inside a
// virtual block, runs of I consecutive tokens go round-robin to ranks 0..N−1, and each rank keeps
// its tokens densely, in position order, in its own physical block with the same block id.
//
//   vb = pos / V; off = pos mod V; owner = (off / I) mod N;
//   local = (off / (N·I))·I + off mod I   in [0, B)
//   slot  = block_table[vb]·B + local     (every rank uses the same block ids in its own pool)
//
// Because a rank's tokens are dense, "the first k tokens a rank owns" are local indices
// 0..k−1, stored at block_table[j / B]·B + j mod B. LocalLen(S) is how many of positions [0, S)
// a rank owns; GlobalPosition inverts the map.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "attention/hd.h"

namespace tandem {

// Shape of a DCP group's token placement. Same on every rank of the group.
struct DcpGeometry {
  int32_t block_size = 16;  // B: tokens per physical block on one rank
  int32_t dcp = 1;          // N: ranks in the group
  int32_t interleave = 1;   // I: consecutive tokens per rank before moving to the next
};

// OK iff B ≥ 1, N ≥ 1, I ≥ 1 and B % I == 0; otherwise INVALID_ARGUMENT naming the rule.
absl::Status ValidateDcpGeometry(const DcpGeometry& g);

TANDEM_HD constexpr int64_t VirtualBlockTokens(const DcpGeometry& g) {
  return static_cast<int64_t>(g.block_size) * g.dcp;
}

// Virtual blocks needed to hold `num_tokens` tokens.
TANDEM_HD constexpr int64_t VirtualBlocksFor(const DcpGeometry& g, int64_t num_tokens) {
  const int64_t v = VirtualBlockTokens(g);
  return (num_tokens + v - 1) / v;
}

TANDEM_HD constexpr int32_t OwnerRank(const DcpGeometry& g, int64_t pos) {
  const int64_t off = pos % VirtualBlockTokens(g);
  return static_cast<int32_t>((off / g.interleave) % g.dcp);
}

// Offset of `pos` inside its owner's physical block, in [0, B).
TANDEM_HD constexpr int32_t LocalOffset(const DcpGeometry& g, int64_t pos) {
  const int64_t off = pos % VirtualBlockTokens(g);
  const int64_t ni = static_cast<int64_t>(g.dcp) * g.interleave;
  return static_cast<int32_t>((off / ni) * g.interleave + off % g.interleave);
}

// Index of `pos` in its owner's dense local sequence.
TANDEM_HD constexpr int64_t LocalIndex(const DcpGeometry& g, int64_t pos) {
  return (pos / VirtualBlockTokens(g)) * g.block_size + LocalOffset(g, pos);
}

// Global position of local token `j` of rank `rank` (inverse of LocalIndex).
TANDEM_HD constexpr int64_t GlobalPosition(const DcpGeometry& g, int32_t rank, int64_t j) {
  const int64_t vb = j / g.block_size;
  const int64_t l = j % g.block_size;
  const int64_t off = (l / g.interleave) * g.dcp * g.interleave +
                      static_cast<int64_t>(rank) * g.interleave + l % g.interleave;
  return vb * VirtualBlockTokens(g) + off;
}

// Tokens among positions [0, S) owned by rank R of an N-rank group with interleave I.
TANDEM_HD constexpr int64_t LocalLen(int64_t S, int32_t N, int32_t R, int32_t I) {
  const int64_t full_rounds = (S / I) / N;  // complete passes of N·I tokens
  const int64_t base = full_rounds * I;
  int64_t rest = S - full_rounds * I * N - static_cast<int64_t>(R) * I;
  rest = rest < 0 ? 0 : (rest > I ? I : rest);
  return base + rest;
}

TANDEM_HD constexpr int64_t LocalLen(const DcpGeometry& g, int32_t rank, int64_t S) {
  return LocalLen(S, g.dcp, rank, g.interleave);
}

// Slot of `pos` on `rank`, or −1 when another rank owns it.
// REQUIRES: block_table has at least VirtualBlocksFor(pos + 1) entries.
TANDEM_HD constexpr int64_t SlotOf(const DcpGeometry& g, int32_t rank, int64_t pos,
                                   const int32_t* block_table) {
  if (OwnerRank(g, pos) != rank) return -1;
  const int64_t vb = pos / VirtualBlockTokens(g);
  return static_cast<int64_t>(block_table[vb]) * g.block_size + LocalOffset(g, pos);
}

// Slot of local token j of a rank (its tokens are dense in local order).
TANDEM_HD constexpr int64_t SlotOfLocal(const DcpGeometry& g, int64_t j,
                                        const int32_t* block_table) {
  return static_cast<int64_t>(block_table[j / g.block_size]) * g.block_size + j % g.block_size;
}

// Block tables of a batch in CSR form: request r's virtual block ids are
// ids[offsets[r] .. offsets[r+1]).
struct BlockTablesView {
  const int32_t* ids = nullptr;
  const int64_t* offsets = nullptr;  // [num_requests + 1]
  int32_t num_requests = 0;

  TANDEM_HD const int32_t* table(int32_t r) const { return ids + offsets[r]; }
  TANDEM_HD int64_t num_blocks(int32_t r) const { return offsets[r + 1] - offsets[r]; }
};

// Slot mapping for a batch of rows on `rank`: slots[i] = SlotOf(positions[i]) in the block table
// of request request_index[i], or −1 where the row's token is owned by another rank.
// Returns INVALID_ARGUMENT when sizes differ, a request index is out of range, a position is
// negative, or a block table is too short for its position.
absl::Status ComputeSlotMapping(const DcpGeometry& g, int32_t rank,
                                absl::Span<const int64_t> positions,
                                absl::Span<const int32_t> request_index,
                                const BlockTablesView& tables, absl::Span<int64_t> slots);

}  // namespace tandem
