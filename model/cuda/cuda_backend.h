// ComputeBackend on one NVIDIA GPU: cuBLAS bf16 GEMMs (fp32 accumulation) and Tandem's CUDA
// kernels (attention/cuda/, model/cuda/cuda_ops.h), semantics identical to the CPU backend's.
//
// * One non-blocking stream per backend; every op enqueues on it and returns. Synchronize,
//   Download and the first use of new host data wait for the stream, each wait bounded
//   (kCudaWaitTimeout → DEADLINE_EXCEEDED); asynchronous faults are reported there.
// * Creating the backend makes its device current on the calling thread and binds its stream to
//   that thread (common/cuda/cuda_stream.h), which is how the NCCL communicator of the same rank
//   thread orders its collectives after the backend's kernels. Use a backend from the thread
//   that created it.
// * Memory: cudaMalloc (never managed memory). Weights: bf16 [n][k] + f32 bias on the device.
// * Host index arrays (ids, positions, slots, row metadata, block tables) are uploaded through
//   pinned staging; host metadata is validated before upload, so bad indices are
//   INVALID_ARGUMENT, never an illegal GPU address.
// * device_key() = "cuda:<index>".
// * Options (cuda_backend_options.h; CreateCudaBackend(device) reads them from the environment):
//   with bf16 activations, every activation buffer holds bf16 (activation_dtype() = kBF16),
//   GEMMs run on cuBLASLt with bias/residual epilogues where gemm_plan.h says they fit, and only
//   LinearF32Out writes f32. Attention and WriteKv still take f32 (attention_runner.h), so q, k,
//   v and the attention output are converted at that boundary until the attention runner takes
//   bf16.
// * TANDEM_CUDA_ATTENTION=flashinfer also runs RMSNorm, RoPE and the DCP correction through
//   FlashInfer where flashinfer_op_choice.h says it supports them (model/cuda/flashinfer_ops.h).
//
// Creation fails with UNAVAILABLE when the device does not exist or no GPU/driver is usable (the
// message says which, including the CUDA runtime's reason).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/backend.h"
#include "model/cuda/cuda_backend_options.h"

namespace tandem {

// Longest the backend waits for its stream. GPU work of one step takes milliseconds; a wait this
// long means a hung kernel, and collectives have their own (shorter) communicator timeout.
inline constexpr absl::Duration kCudaWaitTimeout = absl::Minutes(5);

// Options from TANDEM_CUDA_ACTIVATIONS / TANDEM_CUDA_GRAPHS (INVALID_ARGUMENT for a bad value).
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(int32_t device_index);
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(
    int32_t device_index, const gpu::CudaBackendOptions& options);

}  // namespace tandem
