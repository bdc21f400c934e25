#include "kv_transfer/token_runs.h"

#include <algorithm>

namespace tandem {
namespace {

// Tokens per placement chunk: consecutive positions that stay consecutive slots of one block of
// one rank. With a single rank the interleave is irrelevant and a whole block is one chunk.
int32_t ChunkTokens(const DcpGeometry& g) { return g.dcp == 1 ? g.block_size : g.interleave; }

}  // namespace

void TokenRunsOfBlock(const DcpGeometry& src, const DcpGeometry& dst, int32_t dst_rank,
                      int64_t dst_vblock, int32_t count, std::vector<TokenRun>* runs) {
  runs->clear();
  const int32_t dst_chunk = ChunkTokens(dst);
  const int32_t src_chunk = ChunkTokens(src);
  const int64_t src_vtokens = VirtualBlockTokens(src);
  const int64_t first_local = dst_vblock * dst.block_size;
  int32_t l = 0;
  while (l < count) {
    const int64_t pos = GlobalPosition(dst, dst_rank, first_local + l);
    // Both sides keep positions consecutive only to the end of their current chunk; chunks are
    // aligned to multiples of the chunk size in position (dst: in local slots) space.
    const int64_t len =
        std::min<int64_t>({count - l, dst_chunk - l % dst_chunk, src_chunk - pos % src_chunk});
    const TokenRun seg{l, OwnerRank(src, pos), pos / src_vtokens, LocalOffset(src, pos),
                       static_cast<int32_t>(len)};
    TokenRun* back = runs->empty() ? nullptr : &runs->back();
    if (back != nullptr && back->src_dcp_rank == seg.src_dcp_rank &&
        back->src_vblock == seg.src_vblock && back->src_offset + back->length == seg.src_offset) {
      back->length += seg.length;  // dst slots are consecutive by construction
    } else {
      runs->push_back(seg);
    }
    l += seg.length;
  }
}

}  // namespace tandem
