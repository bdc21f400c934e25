#include "tests/kv_transfer/plan_simulator.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/dcp_layout.h"
#include "attention/parallel_layout.h"
#include "attention/pool_layout.h"
#include "kv_transfer/kv_digest.h"
#include "kv_transfer/planner.h"

namespace tandem::testing {
namespace {

// Element value: dense index of (position, head, layer, K|V, dim) plus one; slots past the prompt
// carry kTail on top; blocks not allocated to the request hold values with kGarbage set.
template <typename T>
struct Codes;
template <>
struct Codes<uint32_t> {
  static constexpr uint32_t kTail = 1u << 30;
  static constexpr uint32_t kGarbage = 1u << 31;
};
template <>
struct Codes<uint16_t> {
  static constexpr uint16_t kTail = 1u << 14;
  static constexpr uint16_t kGarbage = 1u << 15;
};

int64_t DenseCode(const ModelDims& m, int32_t head, int32_t layer, int32_t kv, int64_t pos,
                  int32_t dim) {
  return (((pos * m.num_kv_heads + head) * m.num_layers + layer) * 2 + kv) * m.head_dim + dim + 1;
}

bool SameParallel(const ParallelConfig& a, const ParallelConfig& b) {
  return a.tp == b.tp && a.pcp == b.pcp && a.dcp == b.dcp && a.block_size == b.block_size &&
         a.interleave == b.interleave;
}

// Block table of `needed` entries over `pool_blocks` ids (see PairCase::table_mode), sometimes
// with one unused extra entry.
std::vector<int32_t> MakeTable(Rng& rng, int64_t needed, int64_t pool_blocks, int mode) {
  std::vector<int32_t> ids(pool_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  if (mode == 0) {
    for (int64_t i = pool_blocks - 1; i > 0; --i) std::swap(ids[i], ids[rng.Below(i + 1)]);
  } else if (mode == 1) {
    std::rotate(ids.begin(), ids.begin() + rng.Below(pool_blocks - needed + 1), ids.end());
  } else {
    std::vector<std::vector<int32_t>> runs;
    for (int64_t i = 0; i < pool_blocks;) {
      const int64_t len = std::min<int64_t>(1 + rng.Below(4), pool_blocks - i);
      runs.emplace_back(ids.begin() + i, ids.begin() + i + len);
      i += len;
    }
    for (int64_t i = static_cast<int64_t>(runs.size()) - 1; i > 0; --i) {
      std::swap(runs[i], runs[rng.Below(i + 1)]);
    }
    ids.clear();
    for (const auto& r : runs) ids.insert(ids.end(), r.begin(), r.end());
  }
  ids.resize(std::min<int64_t>(pool_blocks, needed + rng.Below(2)));
  return ids;
}

// One instance under simulation.
template <typename T>
struct Side {
  KvLayout layout;
  std::vector<int32_t> table;
  std::vector<int64_t> vblock_of;  // physical block id -> virtual block index, or -1
  PoolGeometry geo;
  std::vector<std::vector<T>> pools;  // [rank][element]

  int64_t pool_bytes() const { return static_cast<int64_t>(pools[0].size() * sizeof(T)); }
  // A byte is owned iff its block holds one of the request's virtual blocks.
  bool Owned(int64_t byte) const { return vblock_of[byte / geo.block_bytes()] >= 0; }
};

template <typename T>
Side<T> MakeSide(const KvLayout& layout, std::vector<int32_t> table, int64_t needed,
                 int64_t pool_blocks) {
  Side<T> s{layout,
            std::move(table),
            std::vector<int64_t>(pool_blocks, -1),
            RankPoolGeometry(layout, 0),
            {}};
  for (int64_t vb = 0; vb < needed; ++vb) s.vblock_of[s.table[vb]] = vb;
  s.pools.assign(layout.world(), std::vector<T>(pool_blocks * s.geo.block_elems()));
  return s;
}

template <typename T>
T Expected(const ModelDims& m, const RankPlacement& p, int64_t pos, int64_t num_tokens, int32_t h,
           int32_t l, int32_t kv, int32_t d) {
  const int64_t code = DenseCode(m, p.kv_head_begin + h, l, kv, pos, d);
  return static_cast<T>(pos < num_tokens ? code : (code | Codes<T>::kTail));
}

// Calls f(placement, block, pos, local head, layer, kv, dim, element index) for every element of
// every rank's pool in memory order; pos = -1 in blocks not allocated to the request.
template <typename T, typename F>
void ForEachElement(const Side<T>& s, F&& f) {
  const DcpGeometry g = s.layout.parallel.dcp_geometry();
  const ModelDims& m = s.layout.dims;
  for (int32_t r = 0; r < s.layout.world(); ++r) {
    const RankPlacement p = PlaceRank(s.layout.parallel, m, r);
    for (int64_t b = 0; b < static_cast<int64_t>(s.vblock_of.size()); ++b) {
      const int64_t vb = s.vblock_of[b];
      for (int32_t h = 0; h < s.geo.num_kv_heads; ++h) {
        for (int32_t l = 0; l < m.num_layers; ++l) {
          for (int32_t kv = 0; kv < 2; ++kv) {
            for (int32_t o = 0; o < g.block_size; ++o) {
              const int64_t pos =
                  vb < 0 ? -1 : GlobalPosition(g, p.dcp_rank, vb * g.block_size + o);
              const int64_t e0 = KvElementIndex(s.geo, b, h, l, kv, o);
              for (int32_t d = 0; d < m.head_dim; ++d) f(p, b, pos, h, l, kv, d, e0 + d);
            }
          }
        }
      }
    }
  }
}

// True iff virtual block `vb` of destination DCP rank `rank` holds exactly the tokens of one
// source block, in the same slots. Brute force over the block's slots (past the prompt too).
bool SlotForSlot(const DcpGeometry& gs, const DcpGeometry& gd, int32_t rank, int64_t vb) {
  if (gs.block_size != gd.block_size) return false;
  const int64_t p0 = GlobalPosition(gd, rank, vb * gd.block_size);
  for (int32_t o = 0; o < gd.block_size; ++o) {
    const int64_t p = GlobalPosition(gd, rank, vb * gd.block_size + o);
    if (OwnerRank(gs, p) != OwnerRank(gs, p0) ||
        p / VirtualBlockTokens(gs) != p0 / VirtualBlockTokens(gs) || LocalOffset(gs, p) != o) {
      return false;
    }
  }
  return true;
}

int64_t UsedBlocks(const KvLayout& layout, int32_t rank, int64_t num_tokens) {
  const DcpGeometry g = layout.parallel.dcp_geometry();
  const int32_t r = PlaceRank(layout.parallel, layout.dims, rank).dcp_rank;
  return (LocalLen(g, r, num_tokens) + g.block_size - 1) / g.block_size;
}

// Runs of blocks consecutive in both tables among a destination rank's used blocks, taken in
// ascending destination id order (the order copies are emitted and merged in).
int64_t JointRuns(const std::vector<int32_t>& src, const std::vector<int32_t>& dst, int64_t used) {
  std::vector<int64_t> vbs(used);
  std::iota(vbs.begin(), vbs.end(), 0);
  std::sort(vbs.begin(), vbs.end(), [&](int64_t a, int64_t b) { return dst[a] < dst[b]; });
  int64_t runs = used > 0 ? 1 : 0;
  for (int64_t i = 1; i < used; ++i) {
    const int64_t a = vbs[i - 1], b = vbs[i];
    if (dst[b] != dst[a] + 1 || src[b] != src[a] + 1) ++runs;
  }
  return runs;
}

// Ordering, merging and ranges of every rank's copies, then the copy-count bounds.
std::string CheckCopies(const PairCase& c, const TransferPlan& plan, int64_t src_pool_bytes,
                        int64_t dst_pool_bytes, const std::vector<int32_t>& src_table,
                        const std::vector<int32_t>& dst_table) {
  if (static_cast<int32_t>(plan.copies.size()) != c.dst.world()) return "wrong number of ranks";
  const ParallelConfig& ps = c.src.parallel;
  const ParallelConfig& pd = c.dst.parallel;
  for (int32_t d = 0; d < c.dst.world(); ++d) {
    const auto& cs = plan.copies[d];
    for (size_t i = 0; i < cs.size(); ++i) {
      const TransferCopy& x = cs[i];
      if (x.length <= 0 || x.src_rank < 0 || x.src_rank >= c.src.world() || x.src_offset < 0 ||
          x.src_offset + x.length > src_pool_bytes || x.dst_offset < 0 ||
          x.dst_offset + x.length > dst_pool_bytes) {
        return absl::StrCat("rank ", d, " copy ", i, " out of range");
      }
      if (i == 0) continue;
      const TransferCopy& p = cs[i - 1];
      if (p.dst_offset + p.length > x.dst_offset) {
        return absl::StrCat("rank ", d, " copies ", i - 1, ",", i, " unsorted or overlapping");
      }
      if (p.src_rank == x.src_rank && p.src_offset + p.length == x.src_offset &&
          p.dst_offset + p.length == x.dst_offset) {
        return absl::StrCat("rank ", d, " copies ", i - 1, ",", i, " not merged");
      }
    }
    const int64_t used = UsedBlocks(c.dst, d, c.num_tokens);
    const int64_t n = static_cast<int64_t>(cs.size());
    const RankPlacement place = PlaceRank(pd, c.dst.dims, d);
    const int32_t hd = place.kv_head_count;
    const int32_t hs = RankPoolGeometry(c.src, 0).num_kv_heads;
    // Source head ranges the destination's heads span: hd/hs of them on a head merge, one on a
    // head split, one more when the ranges do not nest (e.g. 3 heads per source, 2 per dest).
    const int64_t spans = (place.kv_head_begin + hd - 1) / hs - place.kv_head_begin / hs + 1;
    if (SameParallel(ps, pd)) {
      // Each destination block is its twin source block on its twin rank: exactly one copy per
      // run of block ids consecutive in both tables.
      const int64_t runs = JointRuns(src_table, dst_table, used);
      if (n != runs) return absl::StrCat("rank ", d, ": ", n, " copies, expected ", runs, " runs");
    } else if (ps.interleave == ps.block_size && pd.interleave == pd.block_size) {
      // Both sides store B-aligned runs of B positions per block. Equal B: a destination block
      // is one source block, copied as one slab per source head range: c = spans. Different B:
      // a destination block overlaps at most ceil(B_d/B_s) + 1 source blocks, and since the row
      // pitch differs no byte range can cross a (head, layer, K|V) row:
      // c = heads·2·layers·(ceil(B_d/B_s) + 1).
      const int64_t per_block = ps.block_size == pd.block_size
                                    ? spans
                                    : int64_t{hd} * 2 * c.dst.dims.num_layers *
                                          ((pd.block_size + ps.block_size - 1) / ps.block_size + 1);
      if (n > per_block * used) {
        return absl::StrCat("rank ", d, ": ", n, " copies > ", per_block, " x ", used, " blocks");
      }
    }
  }
  return "";
}

// KV digests (kv_digest.h) over the same pools: computed on the source, they verify what the
// plan landed — the unit definition fits this layout pair — and a flipped byte at the start of a
// destination copy (always a prompt byte) is DATA_LOSS.
template <typename T>
std::string CheckDigests(const PairCase& c, const TransferPlan& plan,
                         const std::vector<int32_t>& src_table,
                         const std::vector<std::vector<T>>& src_pools,
                         std::vector<std::vector<T>>* dst_pools, Rng& rng) {
  auto views = [](const std::vector<std::vector<T>>& pools) {
    std::vector<absl::Span<const std::byte>> out;
    for (const auto& p : pools) {
      out.emplace_back(reinterpret_cast<const std::byte*>(p.data()), p.size() * sizeof(T));
    }
    return out;
  };
  const std::vector<uint32_t> gens(src_table.size(), 3);
  const KvDigestBinding binding{"sim", 9, src_table, gens};
  const absl::StatusOr<std::vector<uint32_t>> digests =
      ComputeKvDigests(c.src, views(src_pools), c.num_tokens, binding);
  if (!digests.ok()) return absl::StrCat("digests: ", digests.status().ToString());
  const absl::Status ok =
      VerifyKvDigests(c.src, c.dst, plan, c.num_tokens, binding, *digests, views(*dst_pools));
  if (!ok.ok()) return absl::StrCat("digests of a correct transfer: ", ok.ToString());
  int32_t d = static_cast<int32_t>(rng.Below(c.dst.world()));
  for (int32_t i = 0; i < c.dst.world() && plan.copies[d].empty(); ++i) d = (d + 1) % c.dst.world();
  if (plan.copies[d].empty()) return "";
  const TransferCopy& x = plan.copies[d][rng.Below(static_cast<int64_t>(plan.copies[d].size()))];
  reinterpret_cast<uint8_t*>((*dst_pools)[d].data())[x.dst_offset] ^= 0x20;
  const absl::Status bad =
      VerifyKvDigests(c.src, c.dst, plan, c.num_tokens, binding, *digests, views(*dst_pools));
  reinterpret_cast<uint8_t*>((*dst_pools)[d].data())[x.dst_offset] ^= 0x20;
  if (bad.code() != absl::StatusCode::kDataLoss) {
    return absl::StrCat("digests missed a flipped byte of dst rank ", d, ": ", bad.ToString());
  }
  return "";
}

template <typename T>
std::string Simulate(const PairCase& c) {
  Rng rng(c.seed);
  const DcpGeometry gs = c.src.parallel.dcp_geometry();
  const DcpGeometry gd = c.dst.parallel.dcp_geometry();
  const int64_t needed_s = VirtualBlocksFor(gs, c.num_tokens);
  const int64_t needed_d = VirtualBlocksFor(gd, c.num_tokens);
  const int64_t pool_s = needed_s + 1 + rng.Below(3);
  const int64_t pool_d = needed_d + 1 + rng.Below(3);
  Side<T> src =
      MakeSide<T>(c.src, MakeTable(rng, needed_s, pool_s, c.table_mode), needed_s, pool_s);
  Side<T> dst =
      MakeSide<T>(c.dst, MakeTable(rng, needed_d, pool_d, c.table_mode), needed_d, pool_d);
  ForEachElement(src, [&](const RankPlacement& p, int64_t, int64_t pos, int32_t h, int32_t l,
                          int32_t kv, int32_t d, int64_t e) {
    src.pools[p.global_rank][e] =
        pos < 0 ? static_cast<T>(Codes<T>::kGarbage | rng.Below(Codes<T>::kTail))
                : Expected<T>(c.src.dims, p, pos, c.num_tokens, h, l, kv, d);
  });

  const absl::StatusOr<TransferPlan> plan =
      PlanKvTransfer(c.src, src.table, c.dst, dst.table, c.num_tokens);
  if (!plan.ok()) return absl::StrCat("plan failed: ", plan.status().ToString());
  const absl::StatusOr<TransferPlan> again =
      PlanKvTransfer(c.src, src.table, c.dst, dst.table, c.num_tokens);
  if (!again.ok() || again->copies != plan->copies) return "plan is not deterministic";
  std::string err = CheckCopies(c, *plan, src.pool_bytes(), dst.pool_bytes(), src.table, dst.table);
  if (!err.empty()) return err;

  std::vector<std::vector<uint8_t>> writes(c.dst.world(),
                                           std::vector<uint8_t>(dst.pool_bytes(), 0));
  std::vector<std::vector<uint8_t>> reads(c.src.world());
  for (int32_t d = 0; d < c.dst.world(); ++d) {
    for (auto& r : reads) r.assign(src.pool_bytes(), 0);
    auto* out = reinterpret_cast<uint8_t*>(dst.pools[d].data());
    for (const TransferCopy& x : plan->copies[d]) {
      const auto* in = reinterpret_cast<const uint8_t*>(src.pools[x.src_rank].data());
      for (int64_t i = 0; i < x.length; ++i) {
        const int64_t sb = x.src_offset + i, db = x.dst_offset + i;
        if (!src.Owned(sb)) {
          return absl::StrCat("dst rank ", d, " reads unallocated byte ", sb, " of src rank ",
                              x.src_rank);
        }
        if (++reads[x.src_rank][sb] > 1) {
          return absl::StrCat("dst rank ", d, " reads byte ", sb, " of src rank ", x.src_rank,
                              " twice");
        }
        if (!dst.Owned(db)) return absl::StrCat("dst rank ", d, " writes unallocated byte ", db);
        if (++writes[d][db] > 1) return absl::StrCat("dst rank ", d, " writes byte ", db, " twice");
      }
      std::memcpy(out + x.dst_offset, in + x.src_offset, x.length);
    }
  }

  ForEachElement(dst, [&](const RankPlacement& p, int64_t block, int64_t pos, int32_t h, int32_t l,
                          int32_t kv, int32_t d, int64_t e) {
    if (!err.empty() || pos < 0) return;  // unallocated blocks: Owned() already guarded writes
    const uint8_t* w = &writes[p.global_rank][e * static_cast<int64_t>(sizeof(T))];
    const bool all = std::all_of(w, w + sizeof(T), [](uint8_t x) { return x == 1; });
    const bool none = std::all_of(w, w + sizeof(T), [](uint8_t x) { return x == 0; });
    const T want = Expected<T>(c.dst.dims, p, pos, c.num_tokens, h, l, kv, d);
    const T got = dst.pools[p.global_rank][e];
    const bool tail_allowed =
        pos >= c.num_tokens && SlotForSlot(gs, gd, p.dcp_rank, dst.vblock_of[block]);
    const bool ok =
        pos < c.num_tokens ? (all && got == want) : (none || (all && tail_allowed && got == want));
    if (!ok) {
      err = absl::StrCat("dst rank ", p.global_rank, " head ", p.kv_head_begin + h, " layer ", l,
                         " kv ", kv, " pos ", pos, " dim ", d, ": written=", all,
                         " partly=", !all && !none, " past_prompt_write_allowed=", tail_allowed,
                         " got ", got, " want ", want);
    }
  });
  if (!err.empty()) return err;
  return CheckDigests(c, *plan, src.table, src.pools, &dst.pools, rng);
}

template <typename T>
bool Fits(const PairCase& c) {
  const int64_t max_pos = std::max(VirtualBlocksFor(c.src.parallel.dcp_geometry(), c.num_tokens) *
                                       VirtualBlockTokens(c.src.parallel.dcp_geometry()),
                                   VirtualBlocksFor(c.dst.parallel.dcp_geometry(), c.num_tokens) *
                                       VirtualBlockTokens(c.dst.parallel.dcp_geometry()));
  return DenseCode(c.src.dims, 0, 0, 0, max_pos, 0) < Codes<T>::kTail;
}

}  // namespace

std::string PairCase::Describe() const {
  return absl::StrCat("src{", src.parallel.ToString(), "} dst{", dst.parallel.ToString(),
                      "} Hkv=", src.dims.num_kv_heads, " n=", num_tokens,
                      " dtype=", std::string(KvDTypeName(src.dtype)), " tables=", table_mode,
                      " seed=", seed);
}

bool CodesFit(const PairCase& c) {
  return c.src.dtype == KvDType::kF32 ? Fits<uint32_t>(c) : Fits<uint16_t>(c);
}

std::string SimulatePlan(const PairCase& c) {
  if (!CodesFit(c)) return "test bug: element codes do not fit the element type";
  return c.src.dtype == KvDType::kF32 ? Simulate<uint32_t>(c) : Simulate<uint16_t>(c);
}

}  // namespace tandem::testing
