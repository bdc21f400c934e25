#include "kv_transfer/kv_digest.h"

#include <algorithm>
#include <functional>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "attention/dcp_layout.h"
#include "attention/parallel_layout.h"
#include "attention/pool_layout.h"
#include "kv_transfer/crc32c.h"

namespace tandem {
namespace {

int64_t HeadsPerRank(const KvLayout& layout) { return RankPoolGeometry(layout, 0).num_kv_heads; }

// Slots of rank `dcp_rank`'s physical block for virtual block `vblock` that hold prompt tokens:
// its owned tokens are packed from slot 0 in order (dcp_layout.h LocalOffset).
int32_t UsedSlots(const DcpGeometry& g, int32_t dcp_rank, int64_t vblock, int64_t num_tokens) {
  const int64_t v = VirtualBlockTokens(g);
  const int64_t begin = vblock * v;
  const int64_t end = std::min(num_tokens, begin + v);
  if (end - begin == v) return g.block_size;
  int32_t used = 0;
  for (int64_t pos = begin; pos < end; ++pos) used += OwnerRank(g, pos) == dcp_rank ? 1 : 0;
  return used;
}

unsigned char* PutLe(unsigned char* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) *out++ = static_cast<unsigned char>((v >> (8 * i)) & 0xFF);
  return out;
}

// The binding every unit's CRC starts from: CRC32C of (id length, id, lease generation, rank,
// block, block generation, head), little-endian — chained in three calls, no allocation (it runs
// once per unit on every check).
uint32_t Seed(const KvDigestBinding& b, int32_t rank, int64_t table_index, int32_t head) {
  unsigned char len[4];
  PutLe(len, b.request_id.size(), 4);
  uint32_t crc = Crc32c(0, len, sizeof len);
  crc = Crc32c(crc, b.request_id.data(), b.request_id.size());
  unsigned char tail[24];
  unsigned char* p = PutLe(tail, b.lease_generation, 8);
  p = PutLe(p, static_cast<uint32_t>(rank), 4);
  p = PutLe(p, static_cast<uint32_t>(b.block_table[table_index]), 4);
  p = PutLe(p, b.block_generations[table_index], 4);
  PutLe(p, static_cast<uint32_t>(head), 4);
  return Crc32c(crc, tail, sizeof tail);
}

absl::Status CheckBinding(const KvLayout& src, int64_t num_tokens, const KvDigestBinding& b) {
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV digests: num_tokens ", num_tokens, " < 0"));
  }
  const int64_t needed = VirtualBlocksFor(src.parallel.dcp_geometry(), num_tokens);
  if (static_cast<int64_t>(b.block_table.size()) < needed ||
      b.block_generations.size() != b.block_table.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV digests: the prompt needs ", needed, " blocks; the binding has a block table of ",
        b.block_table.size(), " and ", b.block_generations.size(), " block generations"));
  }
  return absl::OkStatus();
}

// Threads worth using for `bytes` of CRC work: at most `threads`, one per 16 MiB.
int32_t Workers(int32_t threads, int64_t bytes) {
  constexpr int64_t kBytesPerThread = int64_t{16} << 20;
  return static_cast<int32_t>(
      std::max<int64_t>(1, std::min<int64_t>(threads, bytes / kBytesPerThread)));
}

// Runs fn(k) for k in [0, n), split in `workers` contiguous chunks (this thread takes the
// first). fn must be safe to run concurrently for different k.
void ForEachChunk(int64_t n, int32_t workers, const std::function<void(int64_t)>& fn) {
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) fn(k);
  };
  const int64_t per = (n + workers - 1) / std::max(workers, 1);
  std::vector<std::thread> pool;
  for (int32_t w = 1; w < workers; ++w) {
    const int64_t begin = std::min(n, w * per), end = std::min(n, (w + 1) * per);
    if (begin < end) pool.emplace_back(run, begin, end);
  }
  run(0, std::min(n, per));
  for (std::thread& t : pool) t.join();
}

// The prompt parts of [off, off + length) of a head slab whose rows (row_bytes each) hold
// `used` prompt bytes first: fn(slab_offset, bytes, stream_pos) for each, in order, where
// stream_pos is the part's position among the unit's prompt bytes. Whole rows of prompt bytes
// come as one part. The one rule both the check (VerifyKvDigestRange) and the CRC requests of a
// pull (KvDigestCrcRequests) split by, so the spans a puller CRCs are the check's parts.
template <typename Fn>
void ForEachPromptPart(int64_t off, int64_t length, int64_t used, int64_t row_bytes, Fn&& fn) {
  const int64_t end = off + length;
  while (off < end) {
    const int64_t row = off / row_bytes;
    const int64_t in_row = off % row_bytes;
    const int64_t row_end = used == row_bytes ? end : std::min(end, (row + 1) * row_bytes);
    if (in_row < used) {
      const int64_t take =
          (used == row_bytes ? row_end : std::min(row_end, row * row_bytes + used)) - off;
      if (!fn(off, take, row * used + in_row)) return;
    }
    off = row_end;
  }
}

// Crc32c(crc, pool + [at, at + n)), taking spans a puller CRCed as it landed them (combined, not
// read) where they start at the right place and fit, and reading the rest.
uint32_t CrcLanded(uint32_t crc, const LandedCrcList* landed, int32_t dst_rank,
                   const std::byte* pool, int64_t at, int64_t n) {
  int64_t pos = at;
  const int64_t end = at + n;
  while (pos < end) {
    const LandedCrcs::Span* span = nullptr;
    if (landed != nullptr) {
      for (auto it = landed->rbegin(); it != landed->rend() && span == nullptr; ++it) {
        span = (*it)->Find(dst_rank, pos);
      }
    }
    if (span != nullptr && span->length <= end - pos) {
      crc = Crc32cCombine(crc, span->crc, static_cast<uint64_t>(span->length));
      pos += span->length;
      continue;
    }
    crc = Crc32c(crc, pool + pos, static_cast<size_t>(end - pos));
    pos = end;
  }
  return crc;
}

struct Piece {
  int64_t unit = 0;
  int64_t slab_offset = 0;  // inside the unit's head slab
  int64_t length = 0;
  int32_t dst_rank = 0;
  int64_t dst_offset = 0;
};

}  // namespace

int32_t DefaultKvDigestThreads() {
  return static_cast<int32_t>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 8));
}

int64_t KvDigestCount(const KvLayout& src, int64_t num_tokens) {
  return src.world() * VirtualBlocksFor(src.parallel.dcp_geometry(), num_tokens) *
         HeadsPerRank(src);
}

int64_t KvDigestIndex(const KvLayout& src, int64_t num_tokens, int32_t rank, int64_t table_index,
                      int32_t head) {
  const int64_t blocks = VirtualBlocksFor(src.parallel.dcp_geometry(), num_tokens);
  return (rank * blocks + table_index) * HeadsPerRank(src) + head;
}

absl::StatusOr<KvBlockChecks> ComputeKvBlockChecks(
    const KvLayout& src, absl::Span<const absl::Span<const std::byte>> pools, int32_t block) {
  if (static_cast<int32_t>(pools.size()) != src.world()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV digests: ", pools.size(), " pools for a world of ", src.world()));
  }
  const PoolGeometry g = RankPoolGeometry(src, 0);
  KvBlockChecks out;
  out.reserve(static_cast<size_t>(src.world() * g.num_kv_heads));
  for (int32_t r = 0; r < src.world(); ++r) {
    if (block < 0 ||
        (block + int64_t{1}) * g.block_bytes() > static_cast<int64_t>(pools[r].size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV digests: block ", block, " lies outside rank ", r, "'s pool"));
    }
    for (int32_t h = 0; h < g.num_kv_heads; ++h) {
      const std::byte* slab = pools[r].data() + HeadsOfBlock(g, block, h, h + 1).offset;
      out.push_back(Crc32c(0, slab, static_cast<size_t>(g.head_slab_bytes())));
    }
  }
  return out;
}

absl::StatusOr<std::vector<uint32_t>> ComputeKvDigests(
    const KvLayout& src, absl::Span<const absl::Span<const std::byte>> pools, int64_t num_tokens,
    const KvDigestBinding& binding, int32_t threads, absl::Span<const KvBlockChecks> known,
    std::vector<KvBlockChecks>* checks_out) {
  if (absl::Status s = CheckBinding(src, num_tokens, binding); !s.ok()) return s;
  if (static_cast<int32_t>(pools.size()) != src.world()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV digests: ", pools.size(), " pools for a world of ", src.world()));
  }
  const DcpGeometry dcp = src.parallel.dcp_geometry();
  const int64_t blocks = VirtualBlocksFor(dcp, num_tokens);
  // All ranks of a valid layout share one geometry (as many heads each).
  const PoolGeometry g = RankPoolGeometry(src, 0);
  const int64_t row_bytes = g.row_elems() * g.elem_bytes();
  const int64_t units_per_block = src.world() * int64_t{g.num_kv_heads};
  // Whether table index i is a full virtual block of this prompt.
  auto full = [&](int64_t i) { return (i + 1) * VirtualBlockTokens(dcp) <= num_tokens; };
  auto known_at = [&](int64_t i) -> const KvBlockChecks* {
    return i < static_cast<int64_t>(known.size()) && !known[i].empty() ? &known[i] : nullptr;
  };
  for (int64_t i = 0; i < blocks; ++i) {
    if (const KvBlockChecks* k = known_at(i); k != nullptr) {
      if (!full(i) || static_cast<int64_t>(k->size()) != units_per_block) {
        return absl::InvalidArgumentError(
            absl::StrCat("KV digests: recorded checks for table index ", i, " (", k->size(),
                         " values) but it is ", full(i) ? "" : "not ", "a full block of ",
                         units_per_block, " units"));
      }
    }
  }
  for (int32_t r = 0; r < src.world(); ++r) {
    for (int64_t i = 0; i < blocks; ++i) {
      const int32_t block = binding.block_table[i];
      if (block < 0 ||
          (block + int64_t{1}) * g.block_bytes() > static_cast<int64_t>(pools[r].size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("KV digests: block ", block, " lies outside rank ", r, "'s pool"));
      }
    }
  }
  const int64_t count = KvDigestCount(src, num_tokens);
  std::vector<uint32_t> checks(static_cast<size_t>(count));
  int64_t read_units = 0;
  for (int64_t i = 0; i < blocks; ++i) read_units += known_at(i) == nullptr ? units_per_block : 0;
  // Unit index = (r · blocks + i) · heads + h (KvDigestIndex).
  ForEachChunk(count, Workers(threads, read_units * g.head_slab_bytes()), [&](int64_t u) {
    const int32_t h = static_cast<int32_t>(u % g.num_kv_heads);
    const int64_t i = (u / g.num_kv_heads) % blocks;
    const int32_t r = static_cast<int32_t>(u / g.num_kv_heads / blocks);
    if (const KvBlockChecks* k = known_at(i); k != nullptr) {
      checks[static_cast<size_t>(u)] = (*k)[static_cast<size_t>(r * g.num_kv_heads + h)];
      return;
    }
    const int32_t dcp_rank = PlaceRank(src.parallel, src.dims, r).dcp_rank;
    const int64_t used_bytes =
        int64_t{UsedSlots(dcp, dcp_rank, i, num_tokens)} * g.head_dim * g.elem_bytes();
    const std::byte* slab =
        pools[r].data() + HeadsOfBlock(g, binding.block_table[i], h, h + 1).offset;
    uint32_t crc = 0;
    if (used_bytes == row_bytes) {
      crc = Crc32c(0, slab, static_cast<size_t>(g.head_slab_bytes()));
    } else {
      for (int32_t row = 0; row < 2 * g.num_layers; ++row) {
        crc = Crc32c(crc, slab + row * row_bytes, static_cast<size_t>(used_bytes));
      }
    }
    checks[static_cast<size_t>(u)] = crc;
  });
  std::vector<uint32_t> out(static_cast<size_t>(count));
  for (int64_t u = 0; u < count; ++u) {
    const int32_t h = static_cast<int32_t>(u % g.num_kv_heads);
    const int64_t i = (u / g.num_kv_heads) % blocks;
    const int32_t r = static_cast<int32_t>(u / g.num_kv_heads / blocks);
    const int64_t used_bytes =
        int64_t{UsedSlots(dcp, PlaceRank(src.parallel, src.dims, r).dcp_rank, i, num_tokens)} *
        g.head_dim * g.elem_bytes();
    out[static_cast<size_t>(u)] =
        Crc32cCombine(Seed(binding, r, i, h), checks[static_cast<size_t>(u)],
                      static_cast<uint64_t>(used_bytes * 2 * g.num_layers));
  }
  if (checks_out != nullptr) {
    checks_out->assign(static_cast<size_t>(blocks), KvBlockChecks());
    for (int64_t i = 0; i < blocks; ++i) {
      if (!full(i)) continue;
      KvBlockChecks& c = (*checks_out)[static_cast<size_t>(i)];
      c.reserve(static_cast<size_t>(units_per_block));
      for (int32_t r = 0; r < src.world(); ++r) {
        for (int32_t h = 0; h < g.num_kv_heads; ++h) {
          c.push_back(checks[static_cast<size_t>(KvDigestIndex(src, num_tokens, r, i, h))]);
        }
      }
    }
  }
  return out;
}

absl::Status VerifyKvDigests(const KvLayout& src, const KvLayout& dst, const TransferPlan& plan,
                             int64_t num_tokens, const KvDigestBinding& binding,
                             absl::Span<const uint32_t> digests,
                             absl::Span<const absl::Span<const std::byte>> dst_pools,
                             std::vector<KvDigestMismatch>* mismatches, int32_t threads) {
  if (absl::Status s = CheckBinding(src, num_tokens, binding); !s.ok()) return s;
  return VerifyKvDigestRange(src, dst, plan, num_tokens, binding, digests, dst_pools, 0,
                             VirtualBlocksFor(src.parallel.dcp_geometry(), num_tokens), mismatches,
                             threads);
}

void LandedCrcs::Add(int32_t dst_rank, absl::Span<const TransferCopy> copies,
                     const CopyCrcs& crcs) {
  if (dst_rank < 0) return;
  if (static_cast<size_t>(dst_rank) >= by_rank_.size()) by_rank_.resize(dst_rank + 1);
  auto& spans = by_rank_[dst_rank];
  const int64_t n = std::min<int64_t>(crcs.copies(), static_cast<int64_t>(copies.size()));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = crcs.first[i]; k < crcs.first[i + 1]; ++k) {
      if (crcs.computed[k] == 0) continue;
      spans[copies[i].dst_offset + crcs.spans[k].offset] = Span{crcs.spans[k].length, crcs.crcs[k]};
      bytes_ += crcs.spans[k].length;
    }
  }
}

const LandedCrcs::Span* LandedCrcs::Find(int32_t dst_rank, int64_t dst_offset) const {
  if (dst_rank < 0 || static_cast<size_t>(dst_rank) >= by_rank_.size()) return nullptr;
  const auto it = by_rank_[dst_rank].find(dst_offset);
  return it == by_rank_[dst_rank].end() ? nullptr : &it->second;
}

absl::StatusOr<std::vector<CopyCrcs>> KvDigestCrcRequests(const KvLayout& src,
                                                          const TransferPlan& plan,
                                                          int64_t num_tokens,
                                                          absl::Span<const int32_t> block_table) {
  const DcpGeometry dcp = src.parallel.dcp_geometry();
  const int64_t blocks = VirtualBlocksFor(dcp, num_tokens);
  if (num_tokens < 0 || static_cast<int64_t>(block_table.size()) < blocks) {
    return absl::InvalidArgumentError(absl::StrCat("KV digest CRC requests: a ", num_tokens,
                                                   "-token prompt needs ", blocks,
                                                   " blocks; the table has ", block_table.size()));
  }
  const PoolGeometry g = RankPoolGeometry(src, 0);
  const int64_t slab_bytes = g.head_slab_bytes();
  const int64_t row_bytes = g.row_elems() * g.elem_bytes();
  // Only the prompt's last block can be partial (UsedSlots): every other block's slabs are one
  // part each, so no block → table index map is needed here (called once per pulled range).
  const int32_t last_block = blocks > 0 ? block_table[blocks - 1] : -1;
  std::vector<CopyCrcs> out(plan.copies.size());
  for (size_t d = 0; d < plan.copies.size(); ++d) {
    CopyCrcs& req = out[d];
    req.first.push_back(0);
    for (const TransferCopy& c : plan.copies[d]) {
      const int32_t dcp_rank = PlaceRank(src.parallel, src.dims, c.src_rank).dcp_rank;
      int64_t off = c.src_offset;
      const int64_t end = c.src_offset + c.length;
      while (off < end) {  // at head-slab boundaries, as the check splits
        const int64_t block = off / g.block_bytes();
        const int32_t head = static_cast<int32_t>((off % g.block_bytes()) / slab_bytes);
        const int64_t slab_begin = block * g.block_bytes() + head * slab_bytes;
        const int64_t piece_end = std::min(end, slab_begin + slab_bytes);
        const int64_t used = block == last_block
                                 ? int64_t{UsedSlots(dcp, dcp_rank, blocks - 1, num_tokens)} *
                                       g.head_dim * g.elem_bytes()
                                 : row_bytes;
        ForEachPromptPart(off - slab_begin, piece_end - off, used, row_bytes,
                          [&](int64_t part, int64_t take, int64_t) {
                            req.spans.push_back(CrcSpan{slab_begin + part - c.src_offset, take});
                            return true;
                          });
        off = piece_end;
      }
      req.first.push_back(static_cast<int64_t>(req.spans.size()));
    }
    req.crcs.assign(req.spans.size(), 0);
    req.computed.assign(req.spans.size(), 0);
  }
  return out;
}

absl::Status VerifyKvDigestRange(const KvLayout& src, const KvLayout& dst, const TransferPlan& plan,
                                 int64_t num_tokens, const KvDigestBinding& binding,
                                 absl::Span<const uint32_t> digests,
                                 absl::Span<const absl::Span<const std::byte>> dst_pools,
                                 int64_t table_begin, int64_t table_end,
                                 std::vector<KvDigestMismatch>* mismatches, int32_t threads,
                                 const LandedCrcList* landed) {
  if (absl::Status s = CheckBinding(src, num_tokens, binding); !s.ok()) return s;
  const int64_t all_blocks = VirtualBlocksFor(src.parallel.dcp_geometry(), num_tokens);
  if (table_begin < 0 || table_begin > table_end || table_end > all_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("KV digests: table index range [", table_begin,
                                                   ", ", table_end, ") is not inside [0, ",
                                                   all_blocks, ")"));
  }
  const int64_t count = KvDigestCount(src, num_tokens);
  if (static_cast<int64_t>(digests.size()) != count) {
    return absl::InvalidArgumentError(absl::StrCat("KV digests: got ", digests.size(),
                                                   " digests, the prompt has ", count, " units"));
  }
  if (dst_pools.size() != plan.copies.size()) {
    return absl::InvalidArgumentError(absl::StrCat("KV digests: ", dst_pools.size(),
                                                   " destination pools for a plan of ",
                                                   plan.copies.size(), " ranks"));
  }
  const DcpGeometry dcp = src.parallel.dcp_geometry();
  const int64_t blocks = VirtualBlocksFor(dcp, num_tokens);
  const int64_t heads = HeadsPerRank(src);
  // All source ranks share one geometry (every rank of a valid layout holds as many heads).
  const PoolGeometry g = RankPoolGeometry(src, 0);
  const int64_t slab_bytes = g.head_slab_bytes();
  const int64_t row_bytes = g.row_elems() * g.elem_bytes();
  // The prompt positions the range's blocks hold.
  const int64_t pos_begin = table_begin * VirtualBlockTokens(dcp);
  const int64_t pos_end = std::min(num_tokens, table_end * VirtualBlockTokens(dcp));
  // Block → table index for the range's blocks (a range is checked once per landed range: the
  // whole table per call would cost more than the check); a copy reaching past the range is
  // looked up in the whole table.
  absl::flat_hash_map<int32_t, int64_t> index_of_block;
  index_of_block.reserve(static_cast<size_t>(table_end - table_begin));
  for (int64_t i = table_begin; i < table_end; ++i) index_of_block[binding.block_table[i]] = i;
  auto table_index_of = [&](int32_t block) -> int64_t {
    if (const auto it = index_of_block.find(block); it != index_of_block.end()) return it->second;
    for (int64_t i = 0; i < blocks; ++i) {
      if (binding.block_table[i] == block) return i;
    }
    return -1;
  };

  // Destination DCP groups: the ranks that together hold every prompt token of their heads.
  std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> groups;
  for (int32_t d = 0; d < static_cast<int32_t>(plan.copies.size()); ++d) {
    const RankPlacement p = PlaceRank(dst.parallel, dst.dims, d);
    groups[{p.pcp_rank, p.dcp_group}].push_back(d);
  }

  std::map<int64_t, KvDigestMismatch> bad;  // by unit
  std::vector<Piece> pieces;
  for (const auto& [key, ranks] : groups) {
    // The prompt bytes this group needs: its heads, every prompt token, each once.
    int64_t needed = 0;
    const DcpGeometry dst_dcp = dst.parallel.dcp_geometry();
    for (int32_t d : ranks) {
      const PoolGeometry dg = RankPoolGeometry(dst, d);
      const int32_t dcp_rank = PlaceRank(dst.parallel, dst.dims, d).dcp_rank;
      int64_t owned = 0;
      for (int64_t pos = pos_begin; pos < pos_end; ++pos) {
        owned += OwnerRank(dst_dcp, pos) == dcp_rank;
      }
      needed += owned * dg.num_kv_heads * 2 * dg.num_layers * dg.head_dim * dg.elem_bytes();
    }
    int64_t verified = 0;
    pieces.clear();
    for (int32_t d : ranks) {
      for (const TransferCopy& c : plan.copies[d]) {
        // Split the copy at head-slab boundaries of the source pool.
        int64_t off = c.src_offset;
        const int64_t end = c.src_offset + c.length;
        while (off < end) {
          const int64_t block = off / g.block_bytes();
          const int32_t head = static_cast<int32_t>((off % g.block_bytes()) / slab_bytes);
          const int64_t slab_begin = block * g.block_bytes() + head * slab_bytes;
          const int64_t piece_end = std::min(end, slab_begin + slab_bytes);
          const int64_t table_index = table_index_of(static_cast<int32_t>(block));
          if (table_index < 0) {
            return absl::InternalError(absl::StrCat(
                "KV digests: destination rank ", d, " read source block ", block, " of rank ",
                c.src_rank, ", which is not in the prompt's block table"));
          }
          if (table_index < table_begin || table_index >= table_end) {
            off = piece_end;
            continue;
          }
          pieces.push_back(Piece{KvDigestIndex(src, num_tokens, c.src_rank, table_index, head),
                                 off - slab_begin, piece_end - off, d,
                                 c.dst_offset + (off - c.src_offset)});
          off = piece_end;
        }
      }
    }
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return std::tie(a.unit, a.slab_offset) < std::tie(b.unit, b.slab_offset);
    });
    // Units in order: pieces[starts[k], starts[k + 1]) belong to the k-th unit read.
    std::vector<size_t> starts;
    for (size_t p = 0; p < pieces.size(); ++p) {
      if (p == 0 || pieces[p].unit != pieces[p - 1].unit) starts.push_back(p);
    }
    starts.push_back(pieces.size());
    const int64_t units = static_cast<int64_t>(starts.size()) - 1;
    struct UnitCheck {
      absl::Status status;
      int64_t total = 0;  // prompt bytes of the unit
      bool match = false;
      std::vector<int32_t> readers;
    };
    std::vector<UnitCheck> checks(static_cast<size_t>(units));
    int64_t group_bytes = 0;
    for (const Piece& piece : pieces) group_bytes += piece.length;
    ForEachChunk(units, Workers(threads, group_bytes), [&](int64_t k) {
      UnitCheck& out = checks[static_cast<size_t>(k)];
      const int64_t unit = pieces[starts[k]].unit;
      const int32_t rank = static_cast<int32_t>(unit / (blocks * heads));
      const int64_t table_index = (unit / heads) % blocks;
      const int32_t head = static_cast<int32_t>(unit % heads);
      const int64_t used_bytes =
          int64_t{UsedSlots(dcp, PlaceRank(src.parallel, src.dims, rank).dcp_rank, table_index,
                            num_tokens)} *
          g.head_dim * g.elem_bytes();
      out.total = used_bytes * 2 * g.num_layers;
      uint32_t crc = Seed(binding, rank, table_index, head);
      int64_t expected = 0;  // prompt bytes of the unit consumed, in source order
      for (size_t p = starts[k]; p < starts[k + 1]; ++p) {
        const Piece& piece = pieces[p];
        if (std::find(out.readers.begin(), out.readers.end(), piece.dst_rank) ==
            out.readers.end()) {
          out.readers.push_back(piece.dst_rank);
        }
        const std::byte* dst_base = dst_pools[piece.dst_rank].data();
        // The piece's intersection with each row's prompt part, in order.
        ForEachPromptPart(
            piece.slab_offset, piece.length, used_bytes, row_bytes,
            [&](int64_t off, int64_t take, int64_t stream_pos) {
              if (stream_pos != expected) {
                out.status = absl::InternalError(absl::StrCat(
                    "KV digests: destination DCP group of rank ", piece.dst_rank,
                    " covers source rank ", rank, " block ", binding.block_table[table_index],
                    " head ", head, " out of order (prompt byte ", stream_pos, ", expected ",
                    expected, ")"));
                return false;
              }
              const int64_t at = piece.dst_offset + (off - piece.slab_offset);
              if (at < 0 || at + take > static_cast<int64_t>(dst_pools[piece.dst_rank].size())) {
                out.status = absl::InvalidArgumentError(
                    absl::StrCat("KV digests: a copy to destination rank ", piece.dst_rank,
                                 " lies outside its pool"));
                return false;
              }
              crc = CrcLanded(crc, landed, piece.dst_rank, dst_base, at, take);
              expected += take;
              return true;
            });
        if (!out.status.ok()) return;
      }
      if (expected != out.total) {
        out.status = absl::InternalError(
            absl::StrCat("KV digests: the destination DCP group of rank ", out.readers.front(),
                         " read ", expected, " of the ", out.total, " prompt bytes of source rank ",
                         rank, " block ", binding.block_table[table_index], " head ", head));
        return;
      }
      out.match = crc == digests[unit];
    });
    for (int64_t k = 0; k < units; ++k) {
      const UnitCheck& c = checks[static_cast<size_t>(k)];
      if (!c.status.ok()) return c.status;
      verified += c.total;
      if (c.match) continue;
      const int64_t unit = pieces[starts[k]].unit;
      const int64_t table_index = (unit / heads) % blocks;
      KvDigestMismatch& m = bad[unit];
      m.src_rank = static_cast<int32_t>(unit / (blocks * heads));
      m.table_index = table_index;
      m.block = binding.block_table[table_index];
      m.block_generation = binding.block_generations[table_index];
      m.head = static_cast<int32_t>(unit % heads);
      m.dst_ranks.insert(m.dst_ranks.end(), c.readers.begin(), c.readers.end());
    }
    if (verified != needed) {
      return absl::InternalError(absl::StrCat("KV digests: the destination DCP group of rank ",
                                              ranks.front(), " read ", verified, " of the ", needed,
                                              " prompt bytes it needs (a truncated plan?)"));
    }
  }
  if (bad.empty()) return absl::OkStatus();
  const KvDigestMismatch& first = bad.begin()->second;
  if (mismatches != nullptr) {
    for (auto& [unit, m] : bad) mismatches->push_back(m);
  }
  return absl::DataLossError(absl::StrCat(
      "KV digest mismatch in ", bad.size(), " of ", count, " units; first: source rank ",
      first.src_rank, " block ", first.block, " (table index ", first.table_index, ", generation ",
      first.block_generation, ") head ", first.head, " as read by destination rank(s) ",
      absl::StrJoin(first.dst_ranks, ",")));
}

}  // namespace tandem
