#include "attention/cuda/decode_attention_plan.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::gpu {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<CudaAttentionKernel> ParseCudaAttentionKernel(std::string_view value) {
  if (value.empty() || value == "per_head") return CudaAttentionKernel::kPerHead;
  if (value == "gqa_split_kv") return CudaAttentionKernel::kGqaSplitKv;
  if (value == "flashinfer") return CudaAttentionKernel::kFlashInfer;
  return absl::InvalidArgumentError(
      absl::StrCat(kCudaAttentionEnv, "=", std::string(value),
                   " is not one of per_head, gqa_split_kv, flashinfer"));
}

AttentionSplit PlanDecodeSplit(int64_t ctas, int64_t max_visible, int32_t tokens_per_step) {
  AttentionSplit s;
  s.tokens_per_split = std::max<int64_t>(max_visible, 1);
  if (ctas <= 0 || tokens_per_step < 1 || max_visible < 2 * kDecodeMinTokensPerSplit) return s;
  const int64_t by_length = max_visible / kDecodeMinTokensPerSplit;
  const int64_t by_occupancy = CeilDiv(kDecodeTargetCtas, ctas);
  const int64_t n = std::min<int64_t>({by_length, by_occupancy, kMaxSplits});
  if (n <= 1) return s;
  // Whole steps per split: only the last step of the last split is partial.
  s.tokens_per_split = CeilDiv(CeilDiv(max_visible, n), tokens_per_step) * tokens_per_step;
  s.num_splits = static_cast<int32_t>(CeilDiv(max_visible, s.tokens_per_split));
  if (s.num_splits == 1) s.tokens_per_split = std::max<int64_t>(max_visible, 1);
  return s;
}

absl::StatusOr<DecodeAttentionPlan> PlanDecodeAttentionWithSplit(int64_t num_rows,
                                                                 int32_t num_q_heads,
                                                                 const PoolGeometry& g,
                                                                 const AttentionSplit& split) {
  const int32_t elem_bytes = static_cast<int32_t>(g.elem_bytes());
  if (!DecodeKernelSupports(g.head_dim, elem_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gqa_split_kv attention: head_dim ", g.head_dim, " of ", elem_bytes,
        "-byte elements is not a whole number of 16-byte vectors in [1, ", kMaxHeadDim, "]"));
  }
  if (g.num_kv_heads < 1 || num_q_heads < 1 || num_q_heads % g.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gqa_split_kv attention: num_q_heads=", num_q_heads,
                     " is not a positive multiple of num_kv_heads=", g.num_kv_heads));
  }
  if (num_rows < 0 || num_rows * g.num_kv_heads > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("gqa_split_kv attention: rows x kv heads = ", num_rows, " x ", g.num_kv_heads,
                     " is outside [0, 2^31)"));
  }
  if (split.num_splits < 1 || split.num_splits > kMaxSplits || split.tokens_per_split < 1) {
    return absl::InvalidArgumentError(absl::StrCat("gqa_split_kv attention: split of ",
                                                   split.num_splits, " x ", split.tokens_per_split,
                                                   " tokens is invalid"));
  }
  DecodeAttentionPlan p;
  p.lanes = DecodeLaneShapeFor(g.head_dim, elem_bytes);
  p.heads_per_pass = DecodeHeadsPerPass(num_q_heads / g.num_kv_heads);
  p.grid_x = num_rows * g.num_kv_heads;
  p.grid_y = split.num_splits;
  p.shared_bytes =
      DecodeSharedFloats(p.heads_per_pass, g.head_dim) * static_cast<int64_t>(sizeof(float));
  p.split = split;
  return p;
}

absl::StatusOr<DecodeAttentionPlan> PlanDecodeAttention(int64_t num_rows, int32_t num_q_heads,
                                                        const PoolGeometry& g,
                                                        int64_t max_visible) {
  // The lane shape (for tokens_per_step) is only meaningful for a supported shape: check first.
  absl::StatusOr<DecodeAttentionPlan> p =
      PlanDecodeAttentionWithSplit(num_rows, num_q_heads, g, AttentionSplit{});
  if (!p.ok()) return p;
  const AttentionSplit split =
      PlanDecodeSplit(num_rows * g.num_kv_heads, max_visible, p->lanes.tokens_per_step);
  return PlanDecodeAttentionWithSplit(num_rows, num_q_heads, g, split);
}

}  // namespace tandem::gpu
