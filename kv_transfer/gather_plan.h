// Gather plan: how a puller moves a copy list made of many small copies with few large reads
// (docs/kv_transfer.md "Token-granular pulls"). Pure: std + abseil.
//
// Why: a token-granular plan (e.g. DCP 2 with interleave 1 → DCP 1) is one copy per
// (token, head, layer, K|V) row piece — 256-byte copies for head_dim 128 bf16 — because
// neighbouring destination slots come from different source ranks. On the source side, though,
// the pieces one destination reads from one source rank are mostly contiguous (a source block
// row holds every other token, all of which this destination wants). Over TCP every get is a
// message round trip served by the source's progress thread, so per-copy gets crawl (~0.05 GB/s);
// reading the source in large contiguous segments into a staging buffer and scattering locally
// with memcpy moves the same bytes at the transport's bulk rate.
//
// PlanGather leaves the copy list untouched (the planner stays exact) and partitions it:
//   * direct: copies read straight into the destination, one get each — copies at least
//     `min_direct_bytes` long, copies of ranks `gatherable` refuses, and small copies that found
//     no neighbour to share a segment with;
//   * segments: contiguous source ranges of one rank, each at most `max_segment_bytes`, covering
//     ≥ 2 small copies; bytes between two of its copies (at most `max_gap_bytes` per hole) are
//     read and discarded. Each segment lists its pieces: where a copy lies inside the segment
//     and where it goes in the destination (pieces contiguous on both sides are merged).
// Every copy is in exactly one of the two, byte for byte (tests/kv_transfer/gather_plan_test.cc).
// Segments alternate between source ranks (round robin over each rank's ascending list), so
// a window of outstanding segment reads keeps every source rank busy.
//
// Cost: O(n) for the direct-only case; O(n · passes) radix sort of the small copies' source
// offsets otherwise (passes ≤ 6, fewer when offsets span fewer bits), no comparison sort.
// Memory: 16 bytes per small copy while planning. Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

struct GatherOptions {
  // Copies this long or longer are read directly (a get of this size is bandwidth-bound).
  int64_t min_direct_bytes = 64 * 1024;
  // Largest segment, i.e. one staging slot. REQUIRES: >= min_direct_bytes.
  int64_t max_segment_bytes = 1024 * 1024;
  // Largest hole inside a segment (source bytes no copy wants, read and dropped). >= 0.
  int64_t max_gap_bytes = 4 * 1024;
};

// One piece of a segment: `length` bytes at `segment_offset` inside the segment go to
// `dst_offset` in the destination pool.
struct GatherPiece {
  int64_t segment_offset = 0;
  int64_t dst_offset = 0;
  int64_t length = 0;

  friend bool operator==(const GatherPiece&, const GatherPiece&) = default;
};

// One large read: `length` bytes from `src_offset` of source rank `src_rank`'s pool; its pieces
// are pieces[first_piece, first_piece + num_pieces). `copies` counts the planned copies it
// carries (≥ 2; pieces may be fewer after merging), `copy_bytes` their bytes (≤ length unless
// source ranges of its copies overlap).
struct GatherSegment {
  int32_t src_rank = 0;
  int64_t src_offset = 0;
  int64_t length = 0;
  int64_t first_piece = 0;
  int64_t num_pieces = 0;
  int64_t copies = 0;
  int64_t copy_bytes = 0;

  friend bool operator==(const GatherSegment&, const GatherSegment&) = default;
};

struct GatherPlan {
  std::vector<int64_t> direct;  // indices into the copy list, ascending
  std::vector<GatherSegment> segments;
  std::vector<GatherPiece> pieces;  // segment s owns pieces[s.first_piece, + s.num_pieces)

  int64_t segment_bytes() const;  // bytes the segments read (copies' bytes plus holes)
};

// REQUIRES: options valid (see GatherOptions), every copy has length > 0, src_offset >= 0 and
// src_rank >= 0. `gatherable(rank)` says whether copies from that source rank may be gathered.
// Lists of 2^32 copies or more are returned all direct.
[[nodiscard]] GatherPlan PlanGather(absl::Span<const TransferCopy> copies,
                                    const GatherOptions& options,
                                    absl::FunctionRef<bool(int32_t)> gatherable);

}  // namespace tandem
