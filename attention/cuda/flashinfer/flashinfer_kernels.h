// Internal to attention/cuda/flashinfer: one FlashInfer attention launch in plain terms, and
// the per-(kernel, dtype, head dim) entry points, each defined in its own small .cu
// (decode_bf16_64.cu, ...) so FlashInfer's templates are instantiated once per file and CI
// compiles them in parallel. Only flashinfer_attention.cu calls these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace tandem::gpu::fi_internal {

struct FiCall {
  void* q = nullptr;       // [rows][num_q_heads][head_dim], KV dtype
  void* o = nullptr;       // same shape, KV dtype
  float* lse = nullptr;    // [rows][num_q_heads], base 2
  void* k_data = nullptr;  // layer's K in block 0 (pool base + k_offset elements)
  void* v_data = nullptr;
  int64_t strides[3] = {0, 0, 0};  // page, head, token (elements)
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t num_q_heads = 0;
  int32_t num_sequences = 0;
  int32_t num_ctas = 0;
  int64_t num_rows = 0;
  float sm_scale = 1.f;
  // Device int32 arrays of the packed plan (flashinfer_plan.h).
  int32_t* qo_indptr = nullptr;
  int32_t* kv_indptr = nullptr;
  int32_t* kv_indices = nullptr;
  int32_t* last_page_len = nullptr;
  int32_t* request = nullptr;
  int32_t* q_tile = nullptr;
  int32_t* kv_tile = nullptr;
  int32_t* o_indptr = nullptr;
  int32_t* kv_chunk = nullptr;
  // Decode key partition: partials [num_ctas][num_q_heads][head_dim] (KV dtype) and their
  // base-2 LSEs; null when not partitioned.
  void* tmp_v = nullptr;
  float* tmp_s = nullptr;
};

// FlashInfer throws on unsupported configurations: these catch it and return INTERNAL with
// its message; CUDA errors come back as the status.
absl::Status DecodeBf16Hd64(const FiCall& c, cudaStream_t s);
absl::Status DecodeBf16Hd128(const FiCall& c, cudaStream_t s);
absl::Status DecodeF16Hd64(const FiCall& c, cudaStream_t s);
absl::Status DecodeF16Hd128(const FiCall& c, cudaStream_t s);
absl::Status PrefillBf16Hd64(const FiCall& c, cudaStream_t s);
absl::Status PrefillBf16Hd128(const FiCall& c, cudaStream_t s);
absl::Status PrefillF16Hd64(const FiCall& c, cudaStream_t s);
absl::Status PrefillF16Hd128(const FiCall& c, cudaStream_t s);

}  // namespace tandem::gpu::fi_internal
