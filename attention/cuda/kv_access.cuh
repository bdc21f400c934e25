// Device helpers shared by the attention kernels (internal to attention_cuda): KV element loads
// and stores per pool dtype, and warp reductions.
//
// Loads widen f16/bf16 to f32, which is exact, so the hardware conversion gives the same value as
// the reference HalfToFloat/Bf16ToFloat. Stores narrow with the shared round-to-nearest-even
// functions of attention/kv_dtype.h so a pool written on the GPU is byte-identical to one
// written by the CPU kernels (the KV transfer moves pools between both).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "attention/kv_dtype.h"

namespace tandem::gpu {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

template <KvDType kDType>
__device__ __forceinline__ float LoadKv(const void* pool, int64_t element) {
  if constexpr (kDType == KvDType::kF32) {
    return static_cast<const float*>(pool)[element];
  } else if constexpr (kDType == KvDType::kF16) {
    return __half2float(__ushort_as_half(static_cast<const uint16_t*>(pool)[element]));
  } else {
    return Bf16ToFloat(static_cast<const uint16_t*>(pool)[element]);
  }
}

template <KvDType kDType>
__device__ __forceinline__ void StoreKv(void* pool, int64_t element, float x) {
  if constexpr (kDType == KvDType::kF32) {
    static_cast<float*>(pool)[element] = x;
  } else if constexpr (kDType == KvDType::kF16) {
    static_cast<uint16_t*>(pool)[element] = FloatToHalf(x);
  } else {
    static_cast<uint16_t*>(pool)[element] = FloatToBf16(x);
  }
}

// Element i of the attention query (PagedAttentionArgs::q): f32, or bf16 bits when `bf16` (the
// CUDA backend's bf16 activations), widened exactly.
__device__ __forceinline__ float LoadQ(const float* q, bool bf16, int64_t i) {
  return bf16 ? Bf16ToFloat(reinterpret_cast<const uint16_t*>(q)[i]) : q[i];
}

// Element i of an attention output: f32, or bf16 bits rounded once when `bf16`.
__device__ __forceinline__ void StoreOut(float* out, bool bf16, int64_t i, float x) {
  if (bf16) {
    reinterpret_cast<uint16_t*>(out)[i] = FloatToBf16(x);
  } else {
    out[i] = x;
  }
}

// Sum over the 32 lanes; every lane receives the result. REQUIRES: all lanes active.
__device__ __forceinline__ float WarpSum(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(kFullMask, x, offset);
  }
  return x;
}

}  // namespace tandem::gpu
