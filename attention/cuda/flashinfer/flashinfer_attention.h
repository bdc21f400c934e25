// FlashInfer kernels behind Tandem's own interfaces (docs/gpu.md#flashinfer): paged decode and
// prefill attention over Tandem's pool and block tables with the exact contract of
// LaunchPagedAttention (attention/cuda/cuda_attention.h: natural-log LSE, padding rows and rows
// without keys give out 0 and lse −inf), FlashInfer's state merge for DCP partials, and its
// RMSNorm (+ residual) and RoPE. The planning is flashinfer_plan.h; FlashInfer's headers come
// from deploy/fetch-flashinfer.sh.
//
// Built in two forms with one header: the FlashInfer kernels when the headers were found at
// configure time, else flashinfer_absent.cc, where FlashInferBuilt() is false and every launch
// returns UNIMPLEMENTED saying how to build it.
//
// No CUDA types: `stream` is a cudaStream_t as void*. Pointers are device memory unless marked
// host. Launchers check shapes (UNIMPLEMENTED for shapes outside the instantiated set,
// INVALID_ARGUMENT otherwise), enqueue and return; they read no device data. Reentrant.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "attention/attention_args.h"
#include "attention/cuda/flashinfer/flashinfer_plan.h"

namespace tandem::gpu {

// Whether this binary holds the FlashInfer kernels.
bool FlashInferBuilt();

// Device scratch, in bytes, a FlashInfer attention call needs (q and out in the KV dtype, the
// base-2 LSE, decode's partition partials).
int64_t FlashInferScratchBytes(const PoolGeometry& g, int32_t num_q_heads, int64_t num_rows,
                               const flashinfer_plan::DecodeWork& decode);

struct FlashInferAttentionArgs {
  KvPoolView pool;  // base: device memory; geometry must pass CheckFlashInferShape
  int32_t layer = 0;
  int64_t num_rows = 0;
  const float* q = nullptr;  // [num_rows][num_q_heads][head_dim], f32 or bf16 (bf16_io)
  int32_t num_q_heads = 0;
  float scale = 1.f;
  float* out = nullptr;  // [num_rows][num_q_heads][head_dim], f32 or bf16 (bf16_io)
  float* lse = nullptr;  // [num_rows][num_q_heads], natural log, f32 always
  // q and out hold bf16 bits (the CUDA backend's bf16 activations); flashinfer_plan.h PlanIo
  // says which of them FlashInfer reads or writes in place.
  bool bf16_io = false;
  flashinfer_plan::FlashInferKernel kernel = flashinfer_plan::FlashInferKernel::kDecode;
  int32_t num_sequences = 0;
  int32_t num_ctas = 0;                // the work list's length
  bool partition_kv = false;           // decode only
  const int32_t* plan = nullptr;       // device copy of PackPlan's blob
  flashinfer_plan::PackedPlan layout;  // offsets into `plan`
  void* scratch = nullptr;             // FlashInferScratchBytes, 16-byte aligned
};

// Runs FlashInfer's decode or prefill kernel on q in the KV dtype (converted into scratch unless
// PlanIo says direct), writes out in the caller's dtype (FlashInfer's output as it is when direct,
// converted from scratch otherwise) and lse · ln 2, forcing out 0 / lse −inf where row_keys is 0.
[[nodiscard]] absl::Status LaunchFlashInferAttention(const FlashInferAttentionArgs& args,
                                                     void* stream);

// FlashInfer's merge_state over n partials in Tandem's layout (LaunchMergePartials' contract):
// partial_out [n][items][head_dim], partial_lse [n][items] natural log; writes out
// [items][head_dim] and, when lse_out != nullptr, the merged natural-log LSE. scratch holds
// MergeScratchFloats floats. head_dim must be 64, 128, 256 or 512.
int64_t FlashInferMergeScratchFloats(int32_t n, int64_t items);
[[nodiscard]] absl::Status LaunchFlashInferMerge(int32_t n, const float* partial_out,
                                                 const float* partial_lse, int64_t items,
                                                 int32_t head_dim, float* out, float* lse_out,
                                                 float* scratch, void* stream);

// FlashInfer's RMSNorm: y[i] = x[i] · w / sqrt(mean(x[i]²) + eps) for x, y [m][n] (float sums).
[[nodiscard]] absl::Status LaunchFlashInferRmsNorm(const float* x, const float* w, int64_t m,
                                                   int64_t n, float eps, float* y, void* stream);
// FlashInfer's fused residual add + RMSNorm, in place: residual += x, then
// x = rmsnorm(residual) · w, for x, residual [m][n].
[[nodiscard]] absl::Status LaunchFlashInferAddRmsNorm(float* x, float* residual, const float* w,
                                                      int64_t m, int64_t n, float eps,
                                                      void* stream);
// FlashInfer's RoPE on q [m][q_heads][head_dim] and k [m][kv_heads][head_dim] in place, at
// positions (device int32 [m]); pair i rotates by pos · theta^(−2i/head_dim). `adjacent_pairs`
// rotates (x[2i], x[2i+1]) (RopeStyle::kAdjacentPairs), else (x[i], x[i + head_dim/2]).
// FlashInfer computes the angle in float with fast intrinsics (see docs/gpu.md#flashinfer).
[[nodiscard]] absl::Status LaunchFlashInferRope(float* q, float* k, int64_t m, int32_t q_heads,
                                                int32_t kv_heads, int32_t head_dim,
                                                const int32_t* positions, float theta,
                                                bool adjacent_pairs, void* stream);

}  // namespace tandem::gpu
