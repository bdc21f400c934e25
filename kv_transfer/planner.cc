#include "kv_transfer/planner.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kv_transfer/head_groups.h"
#include "kv_transfer/token_runs.h"

namespace tandem {
namespace {

bool KnownDType(KvDType t) {
  return t == KvDType::kF32 || t == KvDType::kF16 || t == KvDType::kBF16;
}

// Bytes of one block of one rank, or an error if they do not fit in int64 (metadata comes from a
// peer, so absurd dimensions must not turn into wrapped offsets).
absl::StatusOr<int64_t> CheckedBlockBytes(const KvLayout& layout, absl::string_view side) {
  const PoolGeometry g = RankPoolGeometry(layout, 0);
  int64_t bytes = g.elem_bytes();
  for (const int64_t f : {int64_t{g.num_kv_heads}, int64_t{g.num_layers}, int64_t{2},
                          int64_t{g.block_size}, int64_t{g.head_dim}}) {
    if (__builtin_mul_overflow(bytes, f, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(side, " layout: one KV block does not fit in int64 bytes"));
    }
  }
  return bytes;
}

absl::Status ValidateLayout(const KvLayout& layout, absl::string_view side) {
  if (!KnownDType(layout.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(side, " layout: unknown KV dtype value ", static_cast<int>(layout.dtype)));
  }
  // The planner is role-agnostic: any layout an instance may run with (pcp included) is valid.
  const absl::Status s =
      ValidateParallelConfig(layout.parallel, layout.dims, InstanceRole::kPrefill);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(side, " layout (", layout.parallel.ToString(), "): ", s.message()));
  }
  return CheckedBlockBytes(layout, side).status();
}

absl::Status Mismatch(absl::string_view field, absl::string_view src, absl::string_view dst) {
  return absl::FailedPreconditionError(absl::StrCat(
      "incompatible KV caches: ", field, " differs (source ", src, ", destination ", dst, ")"));
}

// The first `needed` entries must exist, be non-negative and distinct (a repeated destination
// id would make two virtual blocks write one physical block), and their byte offsets must fit.
absl::Status ValidateBlockTable(absl::string_view side, absl::Span<const int32_t> table,
                                const DcpGeometry& g, int64_t num_tokens, int64_t block_bytes) {
  const int64_t needed = VirtualBlocksFor(g, num_tokens);
  if (static_cast<int64_t>(table.size()) < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        side, " block table has ", table.size(), " blocks but ", num_tokens, " tokens need ",
        needed, " (", VirtualBlockTokens(g), " tokens per virtual block)"));
  }
  if (needed == 0) return absl::OkStatus();
  std::vector<int32_t> ids(table.begin(), table.begin() + needed);
  for (int64_t i = 0; i < needed; ++i) {
    if (ids[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(side, " block table entry ", i, " is negative (", ids[i], ")"));
    }
  }
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  if (dup != ids.end()) {
    return absl::InvalidArgumentError(absl::StrCat("block id ", *dup,
                                                   " appears more than once in the first ", needed,
                                                   " entries of the ", side, " block table"));
  }
  int64_t end_bytes = 0;
  if (__builtin_mul_overflow(int64_t{ids.back()} + 1, block_bytes, &end_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(side, " block id ", ids.back(), " puts KV bytes beyond int64 offsets"));
  }
  return absl::OkStatus();
}

// Appends `c`, or extends the last copy when `c` continues it on both sides from the same rank.
void Emit(std::vector<TransferCopy>& out, int32_t src_rank, int64_t src_offset, int64_t dst_offset,
          int64_t length) {
  if (!out.empty()) {
    TransferCopy& b = out.back();
    if (b.src_rank == src_rank && b.src_offset + b.length == src_offset &&
        b.dst_offset + b.length == dst_offset) {
      b.length += length;
      return;
    }
  }
  out.push_back(TransferCopy{src_rank, src_offset, dst_offset, length});
}

// A contiguous range of a destination rank's local heads that one source head group holds.
struct HeadSpan {
  const HeadGroup* src = nullptr;
  int32_t src_head = 0;  // first local head on the source ranks of `src`
  int32_t dst_head = 0;  // first local head on the destination rank
  int32_t count = 0;
};

// Plans one destination rank at a time; holds what all ranks share. Inputs are validated.
class Planner {
 public:
  Planner(const KvLayout& src, absl::Span<const int32_t> src_blocks, const KvLayout& dst,
          absl::Span<const int32_t> dst_blocks, int64_t num_tokens, int64_t begin, int64_t end)
      : src_(src),
        dst_(dst),
        src_blocks_(src_blocks),
        dst_blocks_(dst_blocks),
        num_tokens_(num_tokens),
        begin_(begin),
        end_(end),
        gs_(src.parallel.dcp_geometry()),
        gd_(dst.parallel.dcp_geometry()),
        ps_(RankPoolGeometry(src, 0)),
        pd_(RankPoolGeometry(dst, 0)),
        src_groups_(GroupRanksByHeads(src.parallel, src.dims)),
        dst_groups_(GroupRanksByHeads(dst.parallel, dst.dims)),
        src_vblocks_(VirtualBlocksFor(gs_, num_tokens)),
        token_bytes_(int64_t{src.dims.head_dim} * ps_.elem_bytes()) {}

  std::vector<TransferCopy> PlanRank(int32_t dst_rank) {
    std::vector<TransferCopy> out;
    const RankPlacement place = PlaceRank(dst_.parallel, dst_.dims, dst_rank);
    ChooseReplicas(place);
    BuildHeadSpans(place);
    const int64_t local_total = LocalLen(gd_, place.dcp_rank, num_tokens_);
    // The rank's tokens in [begin_, end_) are one range of its dense local sequence (a rank's
    // local order follows global order): local indices [lo, hi).
    const int64_t lo = LocalLen(gd_, place.dcp_rank, begin_);
    const int64_t hi = LocalLen(gd_, place.dcp_rank, end_);
    if (lo >= hi) return out;
    const int64_t first_block = lo / gd_.block_size;
    const int64_t num_blocks = (hi - 1) / gd_.block_size + 1 - first_block;
    // Visiting blocks by ascending id emits copies by ascending dst_offset: no sort of copies.
    std::vector<int64_t> order(num_blocks);
    std::iota(order.begin(), order.end(), first_block);
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return dst_blocks_[a] < dst_blocks_[b]; });
    for (const int64_t vb : order) {
      const int64_t block_start = vb * gd_.block_size;
      const int32_t count =
          static_cast<int32_t>(std::min<int64_t>(gd_.block_size, local_total - block_start));
      const int32_t slot_lo = static_cast<int32_t>(std::max<int64_t>(lo - block_start, 0));
      const int32_t slot_hi = static_cast<int32_t>(std::min<int64_t>(hi - block_start, count));
      PlanBlock(place.dcp_rank, vb, count, slot_lo, slot_hi, out);
    }
    return out;
  }

 private:
  // Destination replica k of m (destination DCP groups holding the same heads) reads source
  // replicas k, k+m, … over `pieces_` contiguous pieces of the prompt (see planner.h).
  void ChooseReplicas(const RankPlacement& place) {
    const HeadGroup& own =
        *std::find_if(dst_groups_.begin(), dst_groups_.end(),
                      [&](const HeadGroup& g) { return g.contains(place.kv_head_begin); });
    dst_replica_ = place.dcp_group - own.first_dcp_group;
    dst_replicas_ = static_cast<int32_t>(own.replicas.size());
    src_replicas_ = static_cast<int32_t>(src_groups_.front().replicas.size());
    pieces_ =
        src_replicas_ > dst_replicas_ ? (src_replicas_ + dst_replicas_ - 1) / dst_replicas_ : 1;
  }

  int32_t SourceRank(const HeadGroup& g, int64_t src_vblock, int32_t src_dcp_rank) const {
    const int64_t piece = src_vblock * pieces_ / src_vblocks_;
    const int64_t replica = (dst_replica_ + piece * dst_replicas_) % src_replicas_;
    return g.replicas[replica][src_dcp_rank];
  }

  void BuildHeadSpans(const RankPlacement& place) {
    spans_.clear();
    const int32_t end = place.kv_head_begin + place.kv_head_count;
    for (int32_t h = place.kv_head_begin; h < end;) {
      const HeadGroup& g = *std::find_if(src_groups_.begin(), src_groups_.end(),
                                         [&](const HeadGroup& sg) { return sg.contains(h); });
      const int32_t count = std::min(end, g.head_begin + g.head_count) - h;
      spans_.push_back(HeadSpan{&g, h - g.head_begin, h - place.kv_head_begin, count});
      h += count;
    }
  }

  // Copies slots [slot_lo, slot_hi) of the destination's virtual block `vb`, whose first `count`
  // slots hold prompt tokens.
  void PlanBlock(int32_t dst_dcp_rank, int64_t vb, int32_t count, int32_t slot_lo, int32_t slot_hi,
                 std::vector<TransferCopy>& out) {
    const bool same_block_size = gs_.block_size == gd_.block_size;
    // With equal block sizes, look at the whole block (slots past the prompt included) to find
    // out whether it is one source block slot for slot.
    TokenRunsOfBlock(gs_, gd_, dst_dcp_rank, vb, same_block_size ? gd_.block_size : count, &runs_);
    const int64_t dst_block_offset = int64_t{dst_blocks_[vb]} * pd_.block_bytes();
    // The whole-slab copy only when this range covers every prompt slot of the block: a range
    // must never read slots of tokens outside it (the prefill may still be writing them).
    if (same_block_size && runs_.size() == 1 && runs_[0].length == gd_.block_size && slot_lo == 0 &&
        slot_hi == count) {
      const TokenRun& r = runs_[0];
      const int64_t src_block_offset = int64_t{src_blocks_[r.src_vblock]} * ps_.block_bytes();
      for (const HeadSpan& s : spans_) {
        Emit(out, SourceRank(*s.src, r.src_vblock, r.src_dcp_rank),
             src_block_offset + s.src_head * ps_.head_slab_bytes(),
             dst_block_offset + s.dst_head * pd_.head_slab_bytes(),
             s.count * pd_.head_slab_bytes());
      }
      return;
    }
    ClipRuns(slot_lo, slot_hi);
    const int64_t src_row = ps_.row_elems() * ps_.elem_bytes();
    const int64_t dst_row = pd_.row_elems() * pd_.elem_bytes();
    const int32_t rows = 2 * src_.dims.num_layers;  // (layer, K|V) rows of a head slab
    for (const HeadSpan& s : spans_) {
      run_src_.clear();
      for (const TokenRun& r : runs_) {
        run_src_.push_back(
            {SourceRank(*s.src, r.src_vblock, r.src_dcp_rank),
             int64_t{src_blocks_[r.src_vblock]} * ps_.block_bytes() + r.src_offset * token_bytes_});
      }
      for (int32_t i = 0; i < s.count; ++i) {
        const int64_t src_head = (s.src_head + i) * ps_.head_slab_bytes();
        const int64_t dst_head = dst_block_offset + (s.dst_head + i) * pd_.head_slab_bytes();
        for (int32_t row = 0; row < rows; ++row) {
          for (size_t j = 0; j < runs_.size(); ++j) {
            Emit(out, run_src_[j].rank, run_src_[j].offset + src_head + row * src_row,
                 dst_head + row * dst_row + runs_[j].dst_offset * token_bytes_,
                 runs_[j].length * token_bytes_);
          }
        }
      }
    }
  }

  // Keeps the part of runs_ at slots [lo, hi) (drops tokens past the prompt or outside the range).
  // A run's source slots are consecutive, so trimming its front moves both offsets alike.
  void ClipRuns(int32_t lo, int32_t hi) {
    while (!runs_.empty() && runs_.back().dst_offset >= hi) runs_.pop_back();
    if (!runs_.empty()) {
      TokenRun& last = runs_.back();
      last.length = std::min(last.length, hi - last.dst_offset);
    }
    size_t drop = 0;
    while (drop < runs_.size() && runs_[drop].dst_offset + runs_[drop].length <= lo) ++drop;
    runs_.erase(runs_.begin(), runs_.begin() + static_cast<std::ptrdiff_t>(drop));
    if (!runs_.empty() && runs_.front().dst_offset < lo) {
      TokenRun& first = runs_.front();
      const int32_t skip = lo - first.dst_offset;
      first.dst_offset += skip;
      first.src_offset += skip;
      first.length -= skip;
    }
  }

  struct RunSource {
    int32_t rank;
    int64_t offset;  // pool offset of the run's first slot in head 0, layer 0, K
  };

  const KvLayout& src_;
  const KvLayout& dst_;
  absl::Span<const int32_t> src_blocks_;
  absl::Span<const int32_t> dst_blocks_;
  int64_t num_tokens_;
  int64_t begin_;  // tokens [begin_, end_) are planned
  int64_t end_;
  DcpGeometry gs_;
  DcpGeometry gd_;
  PoolGeometry ps_;
  PoolGeometry pd_;
  std::vector<HeadGroup> src_groups_;
  std::vector<HeadGroup> dst_groups_;
  int64_t src_vblocks_;
  int64_t token_bytes_;
  // Per destination rank.
  int32_t dst_replica_ = 0;
  int32_t dst_replicas_ = 1;
  int32_t src_replicas_ = 1;
  int32_t pieces_ = 1;
  std::vector<HeadSpan> spans_;
  // Per block (reused buffers).
  std::vector<TokenRun> runs_;
  std::vector<RunSource> run_src_;
};

}  // namespace

absl::Status CheckKvCompatible(const KvLayout& src, const KvLayout& dst) {
  TANDEM_RETURN_IF_ERROR(ValidateLayout(src, "source"));
  TANDEM_RETURN_IF_ERROR(ValidateLayout(dst, "destination"));
  const auto num = [](int32_t v) { return absl::StrCat(v); };
  if (src.dims.num_kv_heads != dst.dims.num_kv_heads) {
    return Mismatch("num_kv_heads", num(src.dims.num_kv_heads), num(dst.dims.num_kv_heads));
  }
  if (src.dims.num_layers != dst.dims.num_layers) {
    return Mismatch("num_layers", num(src.dims.num_layers), num(dst.dims.num_layers));
  }
  if (src.dims.head_dim != dst.dims.head_dim) {
    return Mismatch("head_dim", num(src.dims.head_dim), num(dst.dims.head_dim));
  }
  if (src.dtype != dst.dtype) {
    const auto name = [](KvDType t) {
      const std::string_view n = KvDTypeName(t);
      return absl::string_view(n.data(), n.size());
    };
    return Mismatch("KV dtype", name(src.dtype), name(dst.dtype));
  }
  return absl::OkStatus();
}

absl::StatusOr<TransferPlan> PlanKvTransfer(const KvLayout& src,
                                            absl::Span<const int32_t> src_blocks,
                                            const KvLayout& dst,
                                            absl::Span<const int32_t> dst_blocks,
                                            int64_t num_tokens) {
  return PlanKvTransferRange(src, src_blocks, dst, dst_blocks, num_tokens, 0, num_tokens);
}

absl::StatusOr<TransferPlan> PlanKvTransferRange(const KvLayout& src,
                                                 absl::Span<const int32_t> src_blocks,
                                                 const KvLayout& dst,
                                                 absl::Span<const int32_t> dst_blocks,
                                                 int64_t num_tokens, int64_t begin, int64_t end) {
  TANDEM_RETURN_IF_ERROR(CheckKvCompatible(src, dst));
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens must be >= 0 (got ", num_tokens, ")"));
  }
  if (begin < 0 || begin > end || end > num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("token range [", begin, ", ", end, ") is not inside [0, ", num_tokens, ")"));
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t src_block_bytes, CheckedBlockBytes(src, "source"));
  TANDEM_ASSIGN_OR_RETURN(const int64_t dst_block_bytes, CheckedBlockBytes(dst, "destination"));
  TANDEM_RETURN_IF_ERROR(ValidateBlockTable("source", src_blocks, src.parallel.dcp_geometry(),
                                            num_tokens, src_block_bytes));
  TANDEM_RETURN_IF_ERROR(ValidateBlockTable("destination", dst_blocks, dst.parallel.dcp_geometry(),
                                            num_tokens, dst_block_bytes));
  Planner planner(src, src_blocks, dst, dst_blocks, num_tokens, begin, end);
  TransferPlan plan;
  plan.copies.reserve(dst.world());
  for (int32_t d = 0; d < dst.world(); ++d) plan.copies.push_back(planner.PlanRank(d));
  return plan;
}

}  // namespace tandem
