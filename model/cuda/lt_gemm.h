// Executes a GemmPlan (gemm_plan.h) whose `lt` is true on cuBLASLt: bf16 W and x, fp32
// accumulation, D in the plan's dtype, the plan's epilogue (bias in D's dtype) and beta.
//
// Owns a cublasLt handle and one workspace of GemmWorkspaceBytes(sm_major) bytes, allocated at
// creation so no GEMM ever allocates (a requirement inside CUDA graph capture). The algorithm
// for a (shape, epilogue, dtype, beta) is chosen by cuBLASLt's heuristic once and cached (at
// most kMaxCachedAlgos entries; the cache is cleared when full), told the matrices' actual
// alignment (the heuristic otherwise assumes 256-byte aligned pointers).
//
// Thread-safety: one owner thread (the backend's); enqueues on the stream given to Create.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/cuda/cuda_buffer.h"
#include "model/cuda/gemm_plan.h"

namespace tandem::gpu {

class LtGemm {
 public:
  static constexpr int32_t kMaxCachedAlgos = 512;

  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(int32_t device, cudaStream_t stream);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  int32_t sm_major() const { return sm_major_; }

  // y (+)= epilogue(W·x + bias) per `plan`; w bf16 [n][k], x bf16 [m][k], y [m][n] in
  // plan.d_type, bias [n] in plan.bias_type or nullptr when the epilogue has none.
  // REQUIRES: plan.lt, plan.workspace_bytes <= this workspace.
  absl::Status Run(const GemmPlan& plan, const void* w, const void* x, void* y, const void* bias);

 private:
  LtGemm(int32_t device, cudaStream_t stream, int32_t sm_major, cublasLtHandle_t handle,
         std::unique_ptr<CudaDeviceBuffer> workspace)
      : device_(device),
        stream_(stream),
        sm_major_(sm_major),
        handle_(handle),
        workspace_(std::move(workspace)) {}

  // (rows, cols, depth, epilogue, D dtype, beta != 0, smallest alignment of W, x, y)
  using AlgoKey = std::tuple<int64_t, int64_t, int64_t, uint8_t, uint8_t, bool, uint32_t>;
  const int32_t device_;
  const cudaStream_t stream_;
  const int32_t sm_major_;
  const cublasLtHandle_t handle_;
  std::unique_ptr<CudaDeviceBuffer> workspace_;
  absl::flat_hash_map<AlgoKey, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace tandem::gpu
