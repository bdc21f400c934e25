#include "kv_transfer/gather_plan.h"

#include <algorithm>
#include <limits>

namespace tandem {
namespace {

// A small copy waiting to be grouped: its source offset (the sort key) and its index.
struct Keyed {
  uint64_t key;
  uint32_t index;
};

// Stable LSD radix sort of v by key, 11-bit digits; digits on which every key agrees are skipped
// (pool offsets rarely use more than 35 bits, so this is three or four passes).
void RadixSortByKey(absl::Span<Keyed> v, std::vector<Keyed>& scratch) {
  if (std::is_sorted(v.begin(), v.end(),
                     [](const Keyed& a, const Keyed& b) { return a.key < b.key; })) {
    return;
  }
  constexpr int kBits = 11;
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  uint64_t any = 0;
  uint64_t all = ~uint64_t{0};
  for (const Keyed& k : v) {
    any |= k.key;
    all &= k.key;
  }
  const uint64_t varying = any ^ all;
  scratch.resize(v.size());
  std::vector<size_t> start(kMask + 1);
  absl::Span<Keyed> from = v;
  absl::Span<Keyed> to = absl::MakeSpan(scratch);
  for (int shift = 0; shift < 64; shift += kBits) {
    if (((varying >> shift) & kMask) == 0) continue;
    std::fill(start.begin(), start.end(), 0);
    for (const Keyed& k : from) ++start[(k.key >> shift) & kMask];
    size_t sum = 0;
    for (size_t& s : start) {
      const size_t count = s;
      s = sum;
      sum += count;
    }
    for (const Keyed& k : from) to[start[(k.key >> shift) & kMask]++] = k;
    std::swap(from, to);
  }
  if (from.data() != v.data()) std::copy(from.begin(), from.end(), v.begin());
}

}  // namespace

int64_t GatherPlan::segment_bytes() const {
  int64_t bytes = 0;
  for (const GatherSegment& s : segments) bytes += s.length;
  return bytes;
}

GatherPlan PlanGather(absl::Span<const TransferCopy> copies, const GatherOptions& options,
                      absl::FunctionRef<bool(int32_t)> gatherable) {
  GatherPlan plan;
  const size_t n = copies.size();
  auto all_direct = [&] {
    plan.direct.resize(n);
    for (size_t i = 0; i < n; ++i) plan.direct[i] = static_cast<int64_t>(i);
    return plan;
  };
  if (n >= std::numeric_limits<uint32_t>::max()) return all_direct();

  // One pass in list order: each rank's small copies (their indices, in order) and its runs —
  // maximal stretches of that list whose source ranges follow each other exactly. A planner's
  // token-granular list interleaves ranks, but per rank it walks half rows of source blocks, so
  // runs are long and there are far fewer runs than copies to sort.
  struct Run {
    int64_t src_begin;
    int64_t src_end;
    uint32_t first;  // into the rank's index list
    uint32_t count;
  };
  struct RankCopies {
    int8_t gatherable = -1;  // -1 not asked yet
    std::vector<uint32_t> indices;
    std::vector<Run> runs;
  };
  std::vector<RankCopies> ranks;
  std::vector<uint8_t> gathered(n, 0);
  size_t num_small = 0;
  for (size_t i = 0; i < n; ++i) {
    const TransferCopy& c = copies[i];
    if (c.length >= options.min_direct_bytes) continue;
    if (static_cast<size_t>(c.src_rank) >= ranks.size()) ranks.resize(c.src_rank + 1);
    RankCopies& r = ranks[c.src_rank];
    if (r.gatherable < 0) r.gatherable = gatherable(c.src_rank) ? 1 : 0;
    if (r.gatherable == 0) continue;
    ++num_small;
    if (!r.runs.empty() && r.runs.back().src_end == c.src_offset) {
      r.runs.back().src_end += c.length;
      ++r.runs.back().count;
    } else {
      r.runs.push_back(
          Run{c.src_offset, c.src_offset + c.length, static_cast<uint32_t>(r.indices.size()), 1});
    }
    r.indices.push_back(static_cast<uint32_t>(i));
  }
  if (num_small < 2) return all_direct();

  plan.pieces.reserve(num_small);
  std::vector<Keyed> order;
  std::vector<Keyed> scratch;
  std::vector<std::vector<GatherSegment>> rank_segments(ranks.size());
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const RankCopies& r = ranks[rank];
    if (r.runs.empty()) continue;
    order.resize(r.runs.size());
    for (size_t k = 0; k < r.runs.size(); ++k) {
      order[k] = Keyed{static_cast<uint64_t>(r.runs[k].src_begin), static_cast<uint32_t>(k)};
    }
    RadixSortByKey(absl::MakeSpan(order), scratch);

    // Copies in ascending source order (runs by start, each run's copies in list order); a
    // segment grows while the next copy starts inside it or within max_gap_bytes of its end,
    // and fits in max_segment_bytes.
    std::vector<GatherSegment>& out = rank_segments[rank];
    GatherSegment seg;
    int64_t seg_end = 0;
    uint32_t first_copy = 0;  // the first copy of `seg` while it has only one
    auto close = [&] {
      if (seg.copies >= 2) {
        seg.length = seg_end - seg.src_offset;
        out.push_back(seg);
      } else if (seg.copies == 1) {
        plan.pieces.pop_back();  // a lone copy is read directly after all
        gathered[first_copy] = 0;
      }
      seg = GatherSegment{};
    };
    for (const Keyed& k : order) {
      const Run& run = r.runs[k.index];
      for (uint32_t j = run.first; j < run.first + run.count; ++j) {
        const uint32_t index = r.indices[j];
        const TransferCopy& c = copies[index];
        const int64_t end = c.src_offset + c.length;
        if (seg.copies == 0 || c.src_offset < seg.src_offset ||
            c.src_offset - seg_end > options.max_gap_bytes ||
            std::max(seg_end, end) - seg.src_offset > options.max_segment_bytes) {
          close();
          seg.src_rank = static_cast<int32_t>(rank);
          seg.src_offset = c.src_offset;
          seg.first_piece = static_cast<int64_t>(plan.pieces.size());
          seg_end = end;
          first_copy = index;
        }
        seg_end = std::max(seg_end, end);
        ++seg.copies;
        seg.copy_bytes += c.length;
        gathered[index] = 1;
        const GatherPiece piece{c.src_offset - seg.src_offset, c.dst_offset, c.length};
        if (seg.num_pieces > 0) {
          GatherPiece& last = plan.pieces.back();
          if (last.segment_offset + last.length == piece.segment_offset &&
              last.dst_offset + last.length == piece.dst_offset) {
            last.length += piece.length;
            continue;
          }
        }
        plan.pieces.push_back(piece);
        ++seg.num_pieces;
      }
    }
    close();
  }
  for (size_t i = 0; i < n; ++i) {
    if (!gathered[i]) plan.direct.push_back(static_cast<int64_t>(i));
  }
  // Round robin over the ranks' ascending segment lists.
  size_t total = 0;
  for (const auto& list : rank_segments) total += list.size();
  plan.segments.reserve(total);
  for (size_t k = 0; plan.segments.size() < total; ++k) {
    for (const auto& list : rank_segments) {
      if (k < list.size()) plan.segments.push_back(list[k]);
    }
  }
  return plan;
}

}  // namespace tandem
