// Which of the CUDA backend's paths a backend uses
// (docs/gpu.md#bf16-activations-cublaslt-and-cuda-graphs), and their parsing from the environment
// variables every process running the backend reads when it creates one (like
// TANDEM_CUDA_ATTENTION):
//
//   TANDEM_CUDA_ACTIVATIONS = f32 (unset: the default) | bf16
//       f32:  activations between kernels are f32; each GEMM converts its input to bf16 first.
//       bf16: activations are bf16 between kernels (fp32 math inside every kernel, fp32 GEMM
//             accumulation), GEMMs run on cuBLASLt with bias/residual epilogues; logits stay f32.
//             Instances of one rank only (tp = pcp = dcp = 1): collectives still move f32.
//   TANDEM_CUDA_GRAPHS = off (unset: the default) | on
//       on: decode steps are eligible for capture as CUDA graphs per batch bucket
//       (decode_graph_plan.h).
//
// Pure: no CUDA headers, no getenv (the caller passes the values), so it is tested anywhere.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::gpu {

enum class CudaActivations : uint8_t { kF32, kBF16 };

struct CudaBackendOptions {
  CudaActivations activations = CudaActivations::kF32;
  bool graphs = false;
  // Largest decode batch captured as a graph; larger steps run eagerly.
  int32_t max_graph_batch = 64;
  // At most this many captured graphs, holding at most this many bytes of fixed-address
  // metadata arenas together (decode_graph_plan.h DecodeGraphCache).
  int32_t max_graphs = 32;
  int64_t max_graph_bytes = int64_t{256} << 20;
};

absl::string_view CudaActivationsName(CudaActivations a);

// values: the variables' values, nullptr when unset. INVALID_ARGUMENT naming the variable and
// value for anything else than the documented spellings.
absl::StatusOr<CudaBackendOptions> ParseCudaBackendOptions(const char* activations,
                                                           const char* graphs);

}  // namespace tandem::gpu
