// Internal to attention/cuda/flashinfer: FlashInfer's batch decode and prefill over a FiCall,
// templated on the KV dtype and head dim; included only by the per-instantiation .cu files.
#pragma once

#include <exception>
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>

#include "absl/strings/str_cat.h"
#include "attention/cuda/flashinfer/flashinfer_kernels.h"
#include "attention/cuda/flashinfer/flashinfer_plan.h"

namespace tandem::gpu::fi_internal {

// No custom mask, sliding window, soft cap or ALiBi.
using Variant = flashinfer::DefaultAttention<false, false, false, false>;

template <typename T, uint32_t kHeadDim>
flashinfer::paged_kv_t<T, int32_t> PagedKv(const FiCall& c) {
  return flashinfer::paged_kv_t<T, int32_t>(
      static_cast<uint32_t>(c.num_kv_heads), static_cast<uint32_t>(c.block_size), kHeadDim,
      static_cast<uint32_t>(c.num_sequences), flashinfer::QKVLayout::kHND,
      static_cast<T*>(c.k_data), static_cast<T*>(c.v_data), c.strides, c.kv_indices, c.kv_indptr,
      c.last_page_len);
}

inline absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("flashinfer ", what, ": ", cudaGetErrorString(e)));
}

template <typename T, uint32_t kHeadDim>
absl::Status RunDecode(const FiCall& c, cudaStream_t stream) {
  const auto kv = PagedKv<T, kHeadDim>(c);
  using Params = flashinfer::BatchDecodeParams<T, T, T, int32_t>;
  Params p(static_cast<T*>(c.q), nullptr, kv, static_cast<T*>(c.o), c.lse, nullptr,
           static_cast<uint32_t>(c.num_q_heads), c.num_q_heads * static_cast<int32_t>(kHeadDim),
           static_cast<int32_t>(kHeadDim), /*window_left=*/-1, /*logits_soft_cap=*/0.f, c.sm_scale,
           /*rope_scale=*/1.f, /*rope_theta=*/1e4f);
  p.padded_batch_size = static_cast<uint32_t>(c.num_ctas);
  p.request_indices = c.request;
  p.kv_tile_indices = c.kv_tile;
  p.o_indptr = c.o_indptr;
  p.kv_chunk_size_ptr = c.kv_chunk;
  try {
    return CudaStatus(flashinfer::BatchDecodeWithPagedKVCacheDispatched<
                          kHeadDim, flashinfer::PosEncodingMode::kNone, Variant, Params>(
                          p, static_cast<T*>(c.tmp_v), c.tmp_s, /*enable_pdl=*/false, stream),
                      "decode");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("flashinfer decode: ", e.what()));
  }
}

template <typename T, uint32_t kHeadDim>
absl::Status RunPrefill(const FiCall& c, cudaStream_t stream) {
  const auto kv = PagedKv<T, kHeadDim>(c);
  using Params = flashinfer::BatchPrefillPagedParams<T, T, T, int32_t>;
  Params p(static_cast<T*>(c.q), kv, nullptr, c.qo_indptr, nullptr, nullptr, static_cast<T*>(c.o),
           c.lse, nullptr, static_cast<uint32_t>(c.num_q_heads),
           c.num_q_heads * static_cast<int32_t>(kHeadDim), static_cast<int32_t>(kHeadDim),
           /*window_left=*/-1, /*logits_soft_cap=*/0.f, c.sm_scale, /*rope_scale=*/1.f,
           /*rope_theta=*/1e4f);
  p.request_indices = c.request;
  p.qo_tile_indices = c.q_tile;
  p.kv_tile_indices = c.kv_tile;
  p.o_indptr = c.o_indptr;
  p.kv_chunk_size_ptr = c.kv_chunk;
  p.max_total_num_rows = static_cast<uint32_t>(c.num_rows);
  p.padded_batch_size = static_cast<uint32_t>(c.num_ctas);
  try {
    return CudaStatus(
        flashinfer::BatchPrefillWithPagedKVCacheDispatched<
            /*SAME_KV_STRIDES=*/true, flashinfer_plan::kPrefillCtaTileQ, kHeadDim, kHeadDim,
            flashinfer::PosEncodingMode::kNone, /*USE_FP16_QK_REDUCTION=*/false,
            flashinfer::MaskMode::kCausal, /*USE_TOKEN_HEAD_SF=*/false, Variant, Params>(
            p, /*tmp_v=*/nullptr, /*tmp_s=*/nullptr, /*enable_pdl=*/false, stream),
        "prefill");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("flashinfer prefill: ", e.what()));
  }
}

}  // namespace tandem::gpu::fi_internal
