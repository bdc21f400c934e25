#include "attention/dcp_layout.h"

#include "absl/strings/str_cat.h"

namespace tandem {

absl::Status ValidateDcpGeometry(const DcpGeometry& g) {
  if (g.block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be >= 1 (got ", g.block_size, ")"));
  }
  if (g.dcp < 1)
    return absl::InvalidArgumentError(absl::StrCat("dcp must be >= 1 (got ", g.dcp, ")"));
  if (g.interleave < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("interleave must be >= 1 (got ", g.interleave, ")"));
  }
  if (g.block_size % g.interleave != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size % interleave must be 0 (block_size=", g.block_size,
                     ", interleave=", g.interleave, "); valid interleaves divide the block size"));
  }
  return absl::OkStatus();
}

absl::Status ComputeSlotMapping(const DcpGeometry& g, int32_t rank,
                                absl::Span<const int64_t> positions,
                                absl::Span<const int32_t> request_index,
                                const BlockTablesView& tables, absl::Span<int64_t> slots) {
  if (positions.size() != request_index.size() || positions.size() != slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot mapping sizes differ: positions=", positions.size(),
                     " request_index=", request_index.size(), " slots=", slots.size()));
  }
  if (rank < 0 || rank >= g.dcp) {
    return absl::InvalidArgumentError(absl::StrCat("dcp rank ", rank, " outside [0, ", g.dcp, ")"));
  }
  for (size_t i = 0; i < positions.size(); ++i) {
    const int32_t r = request_index[i];
    const int64_t pos = positions[i];
    if (r < 0 || r >= tables.num_requests) {
      return absl::InvalidArgumentError(absl::StrCat("row ", i, ": request index ", r,
                                                     " outside [0, ", tables.num_requests, ")"));
    }
    if (pos < 0)
      return absl::InvalidArgumentError(absl::StrCat("row ", i, ": negative position ", pos));
    const int64_t vb = pos / VirtualBlockTokens(g);
    if (vb >= tables.num_blocks(r)) {
      return absl::InvalidArgumentError(absl::StrCat("row ", i, ": position ", pos,
                                                     " needs virtual block ", vb, " but request ",
                                                     r, " has ", tables.num_blocks(r), " blocks"));
    }
    slots[i] = SlotOf(g, rank, pos, tables.table(r));
  }
  return absl::OkStatus();
}

}  // namespace tandem
