// CUDA kernels of the attention path (docs/design.md#kv-pool-layout, #attention), with exactly the
// semantics of the CPU kernels (attention/cpu/paged_attention.h, attention/lse_merge.h):
//   * paged attention with LSE over one rank's block-major, head-major KV pool with DCP
//     ownership: row i attends its request's local tokens j < LocalLen(position_i + 1), at slot
//     SlotOfLocal(j); f32/f16/bf16 KV, fp32 accumulation; lse natural log; no keys → lse = −inf
//     and output 0; a negative position marks a padding row (no keys; request/table not read);
//   * the exact N-way LSE merge and the in-place correction of one partial;
//   * the slot-mapped KV cache write (slot −1 skipped), converting to the pool dtype with the
//     round-to-nearest-even conversions of attention/kv_dtype.h (bit-identical to the CPU write).
// The index math is the shared TANDEM_HD code of dcp_layout.h / pool_layout.h / lse_merge.h.
//
// No CUDA types here: `stream` is a cudaStream_t passed as void* (nullptr: the legacy default
// stream). Every pointer is device memory on the current device — including the arrays inside
// AttentionRows (request, position, tables.ids, tables.offsets) and the pool base — unless a
// parameter says `host`.
//
// Launch functions check shapes (INVALID_ARGUMENT naming the problem), enqueue on `stream` and
// return; launch failures come back as the status, faults inside a kernel surface at the next
// synchronisation. They do not read device data on the host, so they do not check block ids or
// slots against the pool: the caller validates its host metadata first (ValidateAttentionCall,
// ValidateKvCacheWrite). Reentrant; kernels on different streams are independent.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "attention/attention_args.h"
#include "attention/cuda/attention_launch_plan.h"

namespace tandem::gpu {

struct PagedAttentionArgs {
  KvPoolView pool;  // base: device memory
  int32_t layer = 0;
  AttentionRows rows;        // arrays in device memory
  const float* q = nullptr;  // [num_rows][num_q_heads][head_dim]
  int32_t num_q_heads = 0;
  float scale = 1.f;         // score = scale · q·k
  float* out = nullptr;      // [num_rows][num_q_heads][head_dim]
  float* lse = nullptr;      // [num_rows][num_q_heads]
  AttentionSplit split;      // PlanAttentionSplit(num_rows · num_q_heads, MaxVisibleTokens(host))
  float* scratch = nullptr;  // AttentionScratchFloats(split, items, head_dim) floats
  // q and out hold bf16 bits (the CUDA backend's bf16 activations): the kernels widen q on load
  // and round each output element once on store; split partials and lse stay f32.
  bool bf16_io = false;
};

// Shape checks shared by the launcher and its callers (no device data is read).
[[nodiscard]] absl::Status CheckPagedAttentionArgs(const PagedAttentionArgs& args);

// Rows whose key range the split does not cover completely get a wrong (truncated) result, so
// split must come from PlanAttentionSplit over at least the rows' real MaxVisibleTokens.
[[nodiscard]] absl::Status LaunchPagedAttention(const PagedAttentionArgs& args, void* stream);

// The same contract through the GQA split-KV decode kernel (decode_attention.cu, work
// decomposition in decode_attention_plan.h): one CTA per (row, KV head, split) serving every
// query head of the KV head, 16-byte KV loads. args.split may be any valid split (normally
// PlanDecodeAttention's); scratch as for LaunchPagedAttention. Additionally INVALID_ARGUMENT when
// head_dim · element size is not a multiple of 16 bytes or the pool base is not 16-byte aligned
// (DecodeKernelSupports). Not yet verified on a GPU: selected only explicitly
// (TANDEM_CUDA_ATTENTION=gqa_split_kv, docs/gpu.md).
[[nodiscard]] absl::Status LaunchDecodeAttention(const PagedAttentionArgs& args, void* stream);

// For row i with slots[i] >= 0 (device [num_rows]), writes k[i], v[i] ([num_kv_heads][head_dim]
// f32 each) into `layer` at that slot. Distinct rows must have distinct slots.
[[nodiscard]] absl::Status LaunchWriteKvCache(const KvPoolView& pool, int32_t layer,
                                              const int64_t* slots, int64_t num_rows,
                                              const float* k, const float* v, void* stream);

// LaunchWriteKvCache from bf16 k, v (the CUDA backend's bf16 activations): each element is
// widened exactly and stored as the f32 one would be, so the pool holds the same bits as
// widening first and calling LaunchWriteKvCache — without the f32 copy.
[[nodiscard]] absl::Status LaunchWriteKvCacheBf16(const KvPoolView& pool, int32_t layer,
                                                  const int64_t* slots, int64_t num_rows,
                                                  const uint16_t* k, const uint16_t* v,
                                                  void* stream);

// MergeAttentionPartials over n partials stored contiguously: partial_out [n][items][head_dim],
// partial_lse [n][items]. Writes out [items][head_dim] (f32, or bf16 bits rounded once when
// out_bf16) and, when lse_out != nullptr, the merged LSE [items]. out must not alias the partials.
[[nodiscard]] absl::Status LaunchMergePartials(int32_t n, const float* partial_out,
                                               const float* partial_lse, int64_t items,
                                               int32_t head_dim, float* out, float* lse_out,
                                               void* stream, bool out_bf16 = false);

// CorrectPartialInPlace: all_lse [n][items]; rescales out [items][head_dim] (partial `me`) in
// place; merged_lse [items] is written when not null.
[[nodiscard]] absl::Status LaunchCorrectPartial(int32_t n, int32_t me, const float* all_lse,
                                                int64_t items, int32_t head_dim, float* out,
                                                float* merged_lse, void* stream);

}  // namespace tandem::gpu
