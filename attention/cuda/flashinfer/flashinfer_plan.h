// Host-side planning of FlashInfer's paged attention over Tandem's KV pool (pure: std + abseil,
// no CUDA or FlashInfer headers), so everything the FlashInfer path decides is unit-tested on
// machines without a GPU. The kernels themselves are FlashInfer's (flashinfer_attention.h).
//
// * Shapes: FlashInfer is instantiated only for what Tandem serves (head_dim 64 and 128, f16
//   and bf16 KV, GQA group sizes FlashInfer's decode dispatches); CheckFlashInferShape names the
//   first field outside that set, and the runner then falls back to Tandem's own kernel.
// * Pool: one layer of the block-major, head-major pool (pool_layout.h) is FlashInfer's HND
//   paged layout with custom strides: page = block, stride_page = block elements, stride_h =
//   head slab, stride_n = head_dim; K of `layer` starts at (2·layer)·B·head_dim elements into
//   block 0, V one B·head_dim row later. FlashInfer keeps these strides as uint32.
// * Sequences: a rank's tokens are dense in local order (dcp_layout.h), so row i attending local
//   tokens j < n_i = LocalLen(position_i + 1) is a FlashInfer sequence of n_i tokens whose pages
//   are the first ceil(n_i / B) ids of its block table and whose last page holds
//   n_i − (pages − 1)·B tokens. Without DCP (dcp == 1), consecutive rows of one request at
//   consecutive positions form one causal query run (FlashInfer's causal mask aligns the last
//   query with the last key, which is exactly position order); with DCP each row is its own
//   sequence of one query. Padding rows (negative position) and rows that see no key are
//   sequences of zero pages; their row_keys entry is 0 and the wrapper writes out = 0,
//   lse = −inf for them itself (attention/cuda/cuda_attention.h semantics).
// * LSE base: FlashInfer's LSE is base 2 (log2 Σ 2^(s·log2e)); Tandem's is natural
//   (docs/design.md#rank-local-attention). lse_e = lse_2 · ln 2, and −inf stays −inf.
// * Work lists: FlashInfer's kernels take per-CTA work lists (request, tile) normally built by
//   its Python-side planner; PlanDecodeWork and PlanPrefillWork build them here.
//
// All int32 arrays are FlashInfer's IdType = int32_t. Thread-safety: pure functions, reentrant.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/attention_args.h"
#include "attention/hd.h"
#include "attention/pool_layout.h"

namespace tandem::gpu::flashinfer_plan {

// ln 2 and log2 e in float: the LSE conversions (FlashInfer base 2 ↔ Tandem natural log).
inline constexpr float kLn2 = 0.693147180559945309417f;
inline constexpr float kLog2E = 1.442695040888963407360f;
TANDEM_HD inline float Log2LseToNatural(float lse2) { return lse2 * kLn2; }
TANDEM_HD inline float NaturalLseToLog2(float lse) { return lse * kLog2E; }

// The instantiated set (attention/cuda/flashinfer/*.cu). Group sizes are FlashInfer's decode
// dispatch (DISPATCH_GQA_GROUP_SIZE); the prefill kernel takes any group.
inline constexpr int32_t kHeadDims[] = {64, 128};
inline constexpr int32_t kGroupSizes[] = {1, 2, 3, 4, 6, 8, 16};
// Query rows × group of one prefill CTA (FlashInfer's CTA_TILE_Q; one instantiation).
inline constexpr int32_t kPrefillCtaTileQ = 64;

struct FlashInferShape {
  int32_t head_dim = 0;
  KvDType dtype = KvDType::kF32;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int64_t block_elems = 0;  // PoolGeometry::block_elems(): FlashInfer's uint32 page stride
};

FlashInferShape ShapeOf(const PoolGeometry& g, int32_t num_q_heads);

// OK when the FlashInfer path runs this shape; otherwise UNIMPLEMENTED naming the field and
// value (the runner logs it and falls back to Tandem's kernel).
absl::Status CheckFlashInferShape(const FlashInferShape& shape);

// One layer of the pool in FlashInfer's HND paged terms (elements, not bytes).
struct PagedKvStrides {
  int64_t k_offset = 0;  // element offset of layer's K in block 0, head 0, token 0
  int64_t v_offset = 0;
  int64_t stride_page = 0;
  int64_t stride_h = 0;
  int64_t stride_n = 0;
};
PagedKvStrides StridesOf(const PoolGeometry& g, int32_t layer);

// FlashInfer's description of one attention call. Sequences s = 0..num_sequences−1, rows
// (Tandem's query rows, in order) r = 0..num_rows−1.
struct PagedKvBatch {
  std::vector<int32_t> qo_indptr;      // [S + 1] query rows of sequence s: [qo_indptr[s], [s+1])
  std::vector<int32_t> kv_indptr;      // [S + 1] its pages: indices[kv_indptr[s] .. [s+1])
  std::vector<int32_t> kv_indices;     // [kv_indptr[S]] block ids
  std::vector<int32_t> last_page_len;  // [S] tokens in the last page (0 when it has no page)
  std::vector<int32_t> row_keys;       // [num_rows] keys row r attends (0: out 0, lse −inf)
  int64_t max_kv_len = 0;              // longest sequence, tokens
  int32_t max_qo_len = 0;              // longest query run (1: every sequence is one row)

  int32_t num_sequences() const { return static_cast<int32_t>(last_page_len.size()); }
  int64_t num_rows() const { return static_cast<int64_t>(row_keys.size()); }
};

// The description of `rows` (host arrays). REQUIRES: rows passed ValidateAttentionCall
// (attention/cpu/paged_attention.h) for its non-padding rows. `causal_runs` false makes every
// row its own sequence (the decode kernel's input); true groups causal runs when rows.dcp.dcp is
// 1. INVALID_ARGUMENT when a count overflows FlashInfer's int32 indices.
absl::StatusOr<PagedKvBatch> BuildPagedKvBatch(const AttentionRows& rows, bool causal_runs);

// Decode work list: CTA c (of num_ctas, times num_kv_heads in y) serves sequence
// request[c], key tile tile[c] of kv_chunk tokens when partition_kv, else the whole sequence
// (request[c] == c). When partition_kv, the partial outputs of sequence s are rows
// o_indptr[s] .. o_indptr[s+1] of a [num_ctas][num_q_heads][head_dim] scratch, merged by LSE.
struct DecodeWork {
  bool partition_kv = false;
  int32_t kv_chunk = 0;  // tokens per tile (a multiple of the page size) when partition_kv
  std::vector<int32_t> request;
  std::vector<int32_t> tile;
  std::vector<int32_t> o_indptr;  // [S + 1]
  int32_t num_ctas() const { return static_cast<int32_t>(request.size()); }
};

// Splitting keys into tiles pays when sequences × KV heads leave the GPU idle: tiles are then
// cut so that about kDecodeTargetCtas CTAs run, never shorter than kDecodeMinChunk tokens.
inline constexpr int64_t kDecodeTargetCtas = 1024;
inline constexpr int64_t kDecodeMinChunk = 256;
DecodeWork PlanDecodeWork(const PagedKvBatch& batch, int32_t num_kv_heads, int32_t block_size);

// Prefill work list (no key partition): sequence s gets ceil(qo_len_s · group / cta_tile_q)
// CTAs, CTA c serving request[c], packed query tile q_tile[c].
struct PrefillWork {
  std::vector<int32_t> request;
  std::vector<int32_t> q_tile;
  int32_t num_ctas() const { return static_cast<int32_t>(request.size()); }
};
PrefillWork PlanPrefillWork(const PagedKvBatch& batch, int32_t group_size, int32_t cta_tile_q);

// Which kernel runs an attention call, decided on the host from shapes alone.
enum class FlashInferKernel { kDecode, kPrefill };
FlashInferKernel ChooseKernel(const PagedKvBatch& batch);

// Whether an attention call takes the FlashInfer path: only when it is selected
// (TANDEM_CUDA_ATTENTION=flashinfer), built into the binary and supports the shape. `fallback`
// says why not when it was selected (the runner logs it once per distinct reason); empty
// otherwise.
struct PathChoice {
  bool flashinfer = false;
  std::string fallback;
};
PathChoice ChoosePath(bool selected, bool built, const FlashInferShape& shape);

// How q and out cross the FlashInfer boundary (LaunchFlashInferAttention). Its kernels take q,
// KV and out in one 16-bit dtype and load q with 16-byte vectors. With bf16 activations
// (bf16_io) over a bf16 pool FlashInfer reads the caller's q and writes the caller's out, and
// the finish pass only zeroes empty rows and converts the LSE: nothing is converted. Otherwise —
// f32 activations, an f16 pool, or a pointer not 16-byte aligned — that side goes through
// scratch with one conversion (f32 ↔ KV dtype, or bf16 ↔ f16).
struct IoPlan {
  bool q_direct = false;    // FlashInfer reads the caller's q
  bool out_direct = false;  // FlashInfer writes the caller's out
};
// q_alignment / out_alignment: the largest power of two dividing the pointer.
IoPlan PlanIo(KvDType kv, bool bf16_io, int32_t q_alignment, int32_t out_alignment);

// Everything the device needs, packed into one int32 blob (uploaded with one copy); the offsets
// are in int32 elements from the blob's start, each array 16-byte aligned.
struct PackedPlan {
  int64_t qo_indptr = 0, kv_indptr = 0, kv_indices = 0, last_page_len = 0, row_keys = 0;
  // request / q_tile / kv_tile: the CTA work list (decode: q_tile aliases kv_tile, unused);
  // o_indptr: decode's partial rows per sequence, prefill's qo_indptr; kv_chunk: one int.
  int64_t request = 0, q_tile = 0, kv_tile = 0, o_indptr = 0, kv_chunk = 0;
  int64_t ints = 0;  // total
};
// Packs batch plus either work list (the other is passed empty).
PackedPlan PackPlan(const PagedKvBatch& batch, const DecodeWork& decode, const PrefillWork& prefill,
                    std::vector<int32_t>& blob);

}  // namespace tandem::gpu::flashinfer_plan
