// Slot-mapped KV cache write (see cuda_attention.h): one thread per (row, KV head, element), from
// f32 or bf16 K/V rows.
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "attention/cuda/cuda_attention.h"
#include "attention/cuda/kv_access.cuh"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond this

// k, v elements as f32: f32 inputs as they are, bf16 inputs (the CUDA backend's bf16
// activations) widened exactly.
__device__ inline float InputValue(const float* p, int64_t i) { return p[i]; }
__device__ inline float InputValue(const uint16_t* p, int64_t i) { return Bf16ToFloat(p[i]); }

template <KvDType kDType, typename In>
__global__ void __launch_bounds__(kThreads)
    WriteKvKernel(void* pool, PoolGeometry g, int32_t layer, const int64_t* slots, int64_t num_rows,
                  const In* k, const In* v) {
  const int64_t row_elems = int64_t{g.num_kv_heads} * g.head_dim;
  const int64_t total = num_rows * row_elems;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  for (int64_t e = int64_t{blockIdx.x} * kThreads + threadIdx.x; e < total; e += stride) {
    const int64_t row = e / row_elems;
    const int64_t slot = slots[row];
    if (slot < 0) continue;  // owned by another DCP rank
    const int32_t head = static_cast<int32_t>((e % row_elems) / g.head_dim);
    const int32_t x = static_cast<int32_t>(e % g.head_dim);
    StoreKv<kDType>(pool, KvSlotElementIndex(g, slot, head, layer, 0) + x, InputValue(k, e));
    StoreKv<kDType>(pool, KvSlotElementIndex(g, slot, head, layer, 1) + x, InputValue(v, e));
  }
}

template <typename In>
absl::Status WriteKvCache(const KvPoolView& pool, int32_t layer, const int64_t* slots,
                          int64_t num_rows, const In* k, const In* v, void* stream) {
  const PoolGeometry& g = pool.geometry;
  if (g.num_kv_heads < 1 || g.head_dim < 1 || g.block_size < 1 || layer < 0 ||
      layer >= g.num_layers || num_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda kv write: invalid shape (kv_heads=", g.num_kv_heads,
                     ", head_dim=", g.head_dim, ", block_size=", g.block_size, ", layer=", layer,
                     " of ", g.num_layers, ", rows=", num_rows, ")"));
  }
  if (num_rows == 0) return absl::OkStatus();
  if (pool.base == nullptr || slots == nullptr || k == nullptr || v == nullptr) {
    return absl::InvalidArgumentError("cuda kv write: a pool/slots/k/v pointer is null");
  }
  const int64_t total = num_rows * g.num_kv_heads * g.head_dim;
  const auto blocks =
      static_cast<unsigned>(std::min(kMaxBlocks, (total + kThreads - 1) / kThreads));
  const auto st = static_cast<cudaStream_t>(stream);
  switch (g.dtype) {
    case KvDType::kF32:
      WriteKvKernel<KvDType::kF32, In>
          <<<blocks, kThreads, 0, st>>>(pool.base, g, layer, slots, num_rows, k, v);
      break;
    case KvDType::kF16:
      WriteKvKernel<KvDType::kF16, In>
          <<<blocks, kThreads, 0, st>>>(pool.base, g, layer, slots, num_rows, k, v);
      break;
    case KvDType::kBF16:
      WriteKvKernel<KvDType::kBF16, In>
          <<<blocks, kThreads, 0, st>>>(pool.base, g, layer, slots, num_rows, k, v);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cuda kv write: pool dtype ", static_cast<int>(g.dtype), " is unknown"));
  }
  TANDEM_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchWriteKvCache(const KvPoolView& pool, int32_t layer, const int64_t* slots,
                                int64_t num_rows, const float* k, const float* v, void* stream) {
  return WriteKvCache(pool, layer, slots, num_rows, k, v, stream);
}

absl::Status LaunchWriteKvCacheBf16(const KvPoolView& pool, int32_t layer, const int64_t* slots,
                                    int64_t num_rows, const uint16_t* k, const uint16_t* v,
                                    void* stream) {
  return WriteKvCache(pool, layer, slots, num_rows, k, v, stream);
}

}  // namespace tandem::gpu
