// FlashInfer's batch prefill for bf16 KV, head_dim 128 (one instantiation per file:
// flashinfer_kernels.h).
#include "attention/cuda/flashinfer/fi_launch.cuh"

namespace tandem::gpu::fi_internal {

absl::Status PrefillBf16Hd128(const FiCall& c, cudaStream_t s) {
  return RunPrefill<__nv_bfloat16, 128>(c, s);
}

}  // namespace tandem::gpu::fi_internal
