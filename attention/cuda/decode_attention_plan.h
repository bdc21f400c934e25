// Launch planning and index math of the GQA split-KV decode attention kernel
// (decode_attention.cu), pure C++ so that it is unit-tested on machines without a GPU: the
// kernel calls exactly these functions (TANDEM_HD) for every index it computes.
//
// Work decomposition (flash-decoding with GQA grouping):
// * grid = (num_rows · num_kv_heads, num_splits): one thread block (CTA) of kDecodeThreads
//   threads per (row, KV head, key split). It serves every query head of that KV head — the
//   GQA group — so each KV byte is read from memory once per row, not once per query head.
// * The split's local tokens [SplitBegin, SplitEnd) are read in "steps" of tokens_per_step
//   tokens: the CTA's threads form token groups of lanes_per_token lanes (a power of two that
//   divides 32); each lane loads vecs_per_lane 16-byte vectors of a token's K row and V row, so
//   a group covers one head_dim row and a warp covers 32 / lanes_per_token tokens per load.
//   Token k (0 ≤ k < kDecodeTokensPerGroup) of group `group` in step `step` is
//   DecodeTokenOf(...): consecutive groups read consecutive tokens (adjacent rows of a block).
// * Query heads are processed `heads_per_pass` (≤ kDecodeMaxHeads, a template parameter of the
//   kernel) at a time; GQA groups larger than kDecodeMaxHeads take several passes over the
//   split's keys (the later passes hit L2).
// * Each token group keeps an online softmax per query head; groups are merged inside the warp
//   (shuffles, xor partner distance lanes_per_token, 2·lanes_per_token, ...), then the warps
//   through shared memory, exactly as lse_merge.h merges partials. With one split the CTA
//   writes the final output and LSE; with several it writes partials in the layout of
//   AttentionScratchFloats (attention_launch_plan.h) that LaunchMergePartials combines.
//
// Requirements (DecodeKernelSupports): head_dim in [1, kMaxHeadDim] and head_dim · elem_bytes a
// multiple of 16, so every K/V row starts 16-byte aligned (every element index of pool_layout.h
// is a multiple of head_dim) and is a whole number of vectors.
//
// Selection: the per-head kernel (paged_attention.cu) stays the default; this kernel is used
// when TANDEM_CUDA_ATTENTION=gqa_split_kv (ParseCudaAttentionKernel) and the shape is supported.
//
// Thread-safety: pure functions, reentrant.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "attention/cuda/attention_launch_plan.h"
#include "attention/hd.h"
#include "attention/pool_layout.h"

namespace tandem::gpu {

// Which CUDA paged-attention kernel the backend launches.
enum class CudaAttentionKernel {
  kPerHead,     // paged_attention.cu: one CTA per (row, query head, split); the default
  kGqaSplitKv,  // decode_attention.cu: one CTA per (row, KV head, split)
  kFlashInfer,  // FlashInfer's decode/prefill (attention/cuda/flashinfer/), per_head fallback
};

// The environment variable that selects the kernel, and its parser: unset or empty or "per_head"
// → kPerHead, "gqa_split_kv" → kGqaSplitKv, "flashinfer" → kFlashInfer, anything else
// INVALID_ARGUMENT naming the values.
inline constexpr char kCudaAttentionEnv[] = "TANDEM_CUDA_ATTENTION";
absl::StatusOr<CudaAttentionKernel> ParseCudaAttentionKernel(std::string_view value);

inline constexpr int32_t kDecodeThreads = 128;
inline constexpr int32_t kDecodeWarps = kDecodeThreads / 32;
inline constexpr int32_t kDecodeVecBytes = 16;
// Query heads one pass keeps accumulators for (per lane: heads × kDecodeDimsPerLane floats).
inline constexpr int32_t kDecodeMaxHeads = 8;
// Tokens a group loads before computing (memory-level parallelism per lane).
inline constexpr int32_t kDecodeTokensPerGroup = 4;
// Head dimensions one lane owns at most: f32 rows of 256 are 64 vectors of 4 over 32 lanes;
// 16-bit rows of 256 are 32 vectors of 8.
inline constexpr int32_t kDecodeDimsPerLane = 8;

// Splitting policy: enough CTAs for a large GPU (about 8 per SM of a 132-SM H200), independent
// of the device so results are reproducible across GPUs; a split never covers fewer keys than
// kDecodeMinTokensPerSplit.
inline constexpr int64_t kDecodeTargetCtas = 1024;
inline constexpr int64_t kDecodeMinTokensPerSplit = 128;

struct DecodeLaneShape {
  int32_t vec_elems = 1;          // elements per 16-byte vector: 4 (f32) or 8 (f16/bf16)
  int32_t chunks = 1;             // vectors per K (or V) row: head_dim / vec_elems
  int32_t lanes_per_token = 1;    // T: power of two in [1, 32], T ≥ ceil(chunks / max vecs)
  int32_t vecs_per_lane = 1;      // ceil(chunks / T)
  int32_t groups_per_warp = 32;   // 32 / T
  int32_t groups_per_cta = 128;   // kDecodeWarps · groups_per_warp
  int32_t tokens_per_step = 512;  // groups_per_cta · kDecodeTokensPerGroup
};

TANDEM_HD constexpr bool DecodeKernelSupports(int32_t head_dim, int32_t elem_bytes) {
  return head_dim >= 1 && head_dim <= kMaxHeadDim && elem_bytes >= 1 &&
         (head_dim * elem_bytes) % kDecodeVecBytes == 0;
}

// The lane layout for a row of head_dim elements of elem_bytes each.
// REQUIRES: DecodeKernelSupports(head_dim, elem_bytes).
TANDEM_HD constexpr DecodeLaneShape DecodeLaneShapeFor(int32_t head_dim, int32_t elem_bytes) {
  DecodeLaneShape s;
  s.vec_elems = kDecodeVecBytes / elem_bytes;
  s.chunks = head_dim / s.vec_elems;
  int32_t t = 1;
  while (t < s.chunks && t < 32) t *= 2;
  s.lanes_per_token = t;
  s.vecs_per_lane = (s.chunks + t - 1) / t;
  s.groups_per_warp = 32 / t;
  s.groups_per_cta = kDecodeWarps * s.groups_per_warp;
  s.tokens_per_step = s.groups_per_cta * kDecodeTokensPerGroup;
  return s;
}

// Vector index (within the row) that lane `lane_in_group` loads as its vector `v`; the lane
// loads it only when it is < chunks. Its elements are [chunk · vec_elems, + vec_elems).
TANDEM_HD constexpr int32_t DecodeChunkOf(const DecodeLaneShape& s, int32_t lane_in_group,
                                          int32_t v) {
  return lane_in_group + v * s.lanes_per_token;
}

// Token group of a thread, and its lane inside the group.
TANDEM_HD constexpr int32_t DecodeGroupOf(const DecodeLaneShape& s, int32_t thread) {
  return (thread / 32) * s.groups_per_warp + (thread % 32) / s.lanes_per_token;
}
TANDEM_HD constexpr int32_t DecodeLaneInGroup(const DecodeLaneShape& s, int32_t thread) {
  return (thread % 32) % s.lanes_per_token;
}

// Key range of split `split`: [SplitBegin, SplitEnd) of the row's `visible` local tokens (empty
// when the split starts at or past the end).
TANDEM_HD constexpr int64_t DecodeSplitBegin(int32_t split, int64_t tokens_per_split) {
  return static_cast<int64_t>(split) * tokens_per_split;
}
TANDEM_HD constexpr int64_t DecodeSplitEnd(int32_t split, int64_t tokens_per_split,
                                           int64_t visible) {
  const int64_t end = DecodeSplitBegin(split, tokens_per_split) + tokens_per_split;
  return end < visible ? end : visible;
}

// Local token that group `group` handles as its k-th token of step `step` of a split starting at
// `begin`; the group skips it when it is >= the split's end.
TANDEM_HD constexpr int64_t DecodeTokenOf(const DecodeLaneShape& s, int64_t begin, int64_t step,
                                          int32_t k, int32_t group) {
  return begin + step * s.tokens_per_step + static_cast<int64_t>(k) * s.groups_per_cta + group;
}

// Steps that cover a split of `len` tokens.
TANDEM_HD constexpr int64_t DecodeSteps(const DecodeLaneShape& s, int64_t len) {
  return len <= 0 ? 0 : (len + s.tokens_per_step - 1) / s.tokens_per_step;
}

// GQA head mapping. A CTA with blockIdx.x = cta serves row cta / num_kv_heads and KV head
// cta % num_kv_heads; pass p, slot h serves query head kv_head · group + p · heads_per_pass + h
// (query head q uses KV head q / group, as in the CPU kernel), when h < DecodeHeadsInPass.
TANDEM_HD constexpr int64_t DecodeRowOf(int64_t cta, int32_t num_kv_heads) {
  return cta / num_kv_heads;
}
TANDEM_HD constexpr int32_t DecodeKvHeadOf(int64_t cta, int32_t num_kv_heads) {
  return static_cast<int32_t>(cta % num_kv_heads);
}
TANDEM_HD constexpr int32_t DecodeHeadPasses(int32_t group, int32_t heads_per_pass) {
  return (group + heads_per_pass - 1) / heads_per_pass;
}
TANDEM_HD constexpr int32_t DecodeHeadsInPass(int32_t group, int32_t heads_per_pass, int32_t pass) {
  const int32_t left = group - pass * heads_per_pass;
  return left < heads_per_pass ? left : heads_per_pass;
}
TANDEM_HD constexpr int32_t DecodeQueryHead(int32_t kv_head, int32_t group, int32_t heads_per_pass,
                                            int32_t pass, int32_t h) {
  return kv_head * group + pass * heads_per_pass + h;
}

// The kernel's heads_per_pass template argument for a GQA group: the smallest of 1, 2, 4, 8 that
// is >= min(group, kDecodeMaxHeads) (fewer accumulator registers for small groups).
TANDEM_HD constexpr int32_t DecodeHeadsPerPass(int32_t group) {
  int32_t h = 1;
  while (h < group && h < kDecodeMaxHeads) h *= 2;
  return h;
}

// Dynamic shared memory of one CTA, in floats: q [heads][head_dim], the warps' accumulators
// [warps][heads][head_dim], their running max and sum [warps][heads] each.
TANDEM_HD constexpr int64_t DecodeSharedFloats(int32_t heads_per_pass, int32_t head_dim) {
  return static_cast<int64_t>(heads_per_pass) * head_dim * (1 + kDecodeWarps) +
         2 * kDecodeWarps * heads_per_pass;
}

// A complete launch: grid, block, shared memory and the key split.
struct DecodeAttentionPlan {
  DecodeLaneShape lanes;
  int32_t heads_per_pass = 1;
  int64_t grid_x = 0;  // num_rows · num_kv_heads
  int32_t grid_y = 1;  // split.num_splits
  int64_t shared_bytes = 0;
  AttentionSplit split;
};

// The key split for `ctas` = rows × KV heads whose longest key range is `max_visible` tokens:
// splits only when there are fewer than kDecodeTargetCtas CTAs and the keys are long; the split
// length is a multiple of tokens_per_step. Same guarantees as PlanAttentionSplit: num_splits in
// [1, kMaxSplits], tokens_per_split >= 1, num_splits · tokens_per_split >= max_visible, and no
// split is empty for the longest row.
AttentionSplit PlanDecodeSplit(int64_t ctas, int64_t max_visible, int32_t tokens_per_step);

// The plan for num_rows rows of num_q_heads query heads over pool geometry `g`;
// INVALID_ARGUMENT when the kernel does not support the shape (head_dim, dtype, GQA ratio).
absl::StatusOr<DecodeAttentionPlan> PlanDecodeAttention(int64_t num_rows, int32_t num_q_heads,
                                                        const PoolGeometry& g, int64_t max_visible);

// The plan for a given split (the split comes from PlanDecodeSplit, or from a test that forces
// one); same checks as PlanDecodeAttention.
absl::StatusOr<DecodeAttentionPlan> PlanDecodeAttentionWithSplit(int64_t num_rows,
                                                                 int32_t num_q_heads,
                                                                 const PoolGeometry& g,
                                                                 const AttentionSplit& split);

}  // namespace tandem::gpu
