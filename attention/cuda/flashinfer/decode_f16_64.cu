// FlashInfer's batch decode for f16 KV, head_dim 64 (one instantiation per file:
// flashinfer_kernels.h).
#include "attention/cuda/flashinfer/fi_launch.cuh"

namespace tandem::gpu::fi_internal {

absl::Status DecodeF16Hd64(const FiCall& c, cudaStream_t s) { return RunDecode<half, 64>(c, s); }

}  // namespace tandem::gpu::fi_internal
