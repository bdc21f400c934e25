#include "kv_transfer/ucx/testing/kv_pattern.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/dcp_layout.h"
#include "attention/parallel_layout.h"
#include "attention/pool_layout.h"

namespace tandem::testing {
namespace {

uint32_t RowCode(int32_t head, int32_t layer, int32_t kv, int64_t pos) {
  uint64_t z = (static_cast<uint64_t>(pos) << 24) ^ (static_cast<uint64_t>(head) << 12) ^
               (static_cast<uint64_t>(layer) << 1) ^ static_cast<uint64_t>(kv);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

// The bytes of one (head, layer, kv, pos) row of head_dim elements.
void MakeRow(const PoolGeometry& g, int32_t head, int32_t layer, int32_t kv, int64_t pos,
             std::vector<std::byte>& row) {
  const int64_t eb = g.elem_bytes();
  row.resize(static_cast<size_t>(g.head_dim * eb));
  const uint32_t code = RowCode(head, layer, kv, pos);
  for (int32_t d = 0; d < g.head_dim; ++d) {
    const uint32_t v = code + static_cast<uint32_t>(d) * 0x9e3779b9u;
    std::memcpy(row.data() + d * eb, &v, static_cast<size_t>(eb));  // little-endian low bytes
  }
}

// Calls fn(global_head, local_head, layer, kv, pos, byte_offset) for every row `rank` owns.
template <typename Fn>
void ForEachOwnedRow(const KvLayout& layout, int32_t rank, absl::Span<const int32_t> blocks,
                     int64_t num_tokens, Fn fn) {
  const RankPlacement place = PlaceRank(layout.parallel, layout.dims, rank);
  const DcpGeometry dcp = layout.parallel.dcp_geometry();
  const PoolGeometry g = RankPoolGeometry(layout, rank);
  const int64_t v = VirtualBlockTokens(dcp);
  for (int64_t pos = 0; pos < num_tokens; ++pos) {
    if (OwnerRank(dcp, pos) != place.dcp_rank) continue;
    const int64_t block = blocks[pos / v];
    const int32_t offset = LocalOffset(dcp, pos);
    for (int32_t h = 0; h < place.kv_head_count; ++h) {
      for (int32_t layer = 0; layer < g.num_layers; ++layer) {
        for (int32_t kv = 0; kv < 2; ++kv) {
          fn(place.kv_head_begin + h, layer, kv, pos, KvByteOffset(g, block, h, layer, kv, offset));
        }
      }
    }
  }
}

}  // namespace

int64_t PoolBytesForBlocks(const KvLayout& layout, absl::Span<const int32_t> blocks) {
  const int32_t max_block = blocks.empty() ? -1 : *std::max_element(blocks.begin(), blocks.end());
  return PoolBytes(RankPoolGeometry(layout, 0), max_block + 1);
}

void PoisonPool(absl::Span<std::byte> pool) { std::fill(pool.begin(), pool.end(), kPoison); }

void FillSourcePool(const KvLayout& layout, int32_t rank, absl::Span<const int32_t> blocks,
                    int64_t num_tokens, absl::Span<std::byte> pool) {
  PoisonPool(pool);
  const PoolGeometry g = RankPoolGeometry(layout, rank);
  std::vector<std::byte> row;
  ForEachOwnedRow(layout, rank, blocks, num_tokens,
                  [&](int32_t head, int32_t layer, int32_t kv, int64_t pos, int64_t offset) {
                    MakeRow(g, head, layer, kv, pos, row);
                    std::memcpy(pool.data() + offset, row.data(), row.size());
                  });
}

absl::Status VerifyDestinationPool(const KvLayout& layout, int32_t rank,
                                   absl::Span<const int32_t> blocks, int64_t num_tokens,
                                   absl::Span<const std::byte> pool) {
  const PoolGeometry g = RankPoolGeometry(layout, rank);
  std::vector<std::byte> row;
  absl::Status status;
  ForEachOwnedRow(
      layout, rank, blocks, num_tokens,
      [&](int32_t head, int32_t layer, int32_t kv, int64_t pos, int64_t offset) {
        if (!status.ok()) return;
        MakeRow(g, head, layer, kv, pos, row);
        if (std::memcmp(pool.data() + offset, row.data(), row.size()) != 0) {
          status = absl::DataLossError(absl::StrCat(
              "destination rank ", rank, ": wrong bytes for head ", head, " layer ", layer,
              kv == 0 ? " K" : " V", " position ", pos, " at pool offset ", offset));
        }
      });
  if (!status.ok()) return status;

  const int64_t used = VirtualBlocksFor(layout.parallel.dcp_geometry(), num_tokens);
  std::vector<bool> in_use(static_cast<size_t>(pool.size() / g.block_bytes()), false);
  for (int64_t i = 0; i < used; ++i) in_use[blocks[i]] = true;
  for (size_t b = 0; b < in_use.size(); ++b) {
    if (in_use[b]) continue;
    const std::byte* begin = pool.data() + b * g.block_bytes();
    const std::byte* bad =
        std::find_if(begin, begin + g.block_bytes(), [](std::byte x) { return x != kPoison; });
    if (bad != begin + g.block_bytes()) {
      return absl::DataLossError(absl::StrCat("destination rank ", rank, ": block ", b,
                                              " is not part of the request but byte ", bad - begin,
                                              " of it was written"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::testing
