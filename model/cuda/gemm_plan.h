// How one linear layer's GEMM runs on the GPU: cuBLASLt with which epilogue, or the
// cublasGemmEx fallback with separate kernels — decided from shapes, dtypes, alignment and the
// device's compute capability only, so the choice is unit-tested without a GPU.
//
// The GEMM: row-major y[m][n] (+)= act(x[m][k]·Wᵀ + b), W bf16 [n][k] as prepared, x bf16,
// fp32 accumulation, y f32 or bf16. cuBLAS is column-major, so it computes yᵀ[n][m] =
// op(A)·B with A = W read column-major as [k][n] (lda = k, transposed), B = x read as [k][m]
// (ldb = k), D = yᵀ (ldd = n); the bias is a vector of D's rows (length n, cuBLASLt's BIAS
// epilogue), stored in D's dtype (cuBLASLt's default bias type; rounding a bias to bf16 changes
// a bf16 output by less than its own rounding). A residual add is beta = 1 with C = D = y.
//
// What fits an epilogue: bias, ReLU and GELU (with or without bias). SiLU does not (cuBLASLt has
// no SiLU epilogue, and SwiGLU multiplies by a second GEMM's output), so it is left to a kernel.
// cuBLASLt is used when every row of A, B and D starts on a 16-byte boundary (k and n multiples
// of 16 / element size) and the pointers are 16-byte aligned; otherwise cublasGemmEx runs and
// bias/activation are kernels (plan.why says which condition failed).
//
// Workspace: 32 MiB on sm_90 and newer, 4 MiB before (the sizes cuBLAS itself uses), allocated
// once per backend so the GEMM never allocates — a requirement inside CUDA graph capture.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::gpu {

enum class GemmDType : uint8_t { kF32, kBF16 };
enum class GemmActivation : uint8_t { kNone, kRelu, kGelu, kSilu };
// cuBLASLt epilogues the plan may choose (mapped 1:1 to cublasLtEpilogue_t by the executor).
enum class GemmEpilogue : uint8_t { kDefault, kBias, kRelu, kReluBias, kGelu, kGeluBias };

struct GemmRequest {
  int64_t m = 0;  // rows of x and y, >= 1
  int64_t n = 0;  // output features, >= 1
  int64_t k = 0;  // input features, >= 1
  GemmDType out = GemmDType::kF32;
  bool bias = false;
  bool accumulate = false;  // y += ... (residual add); no activation allowed with it
  GemmActivation activation = GemmActivation::kNone;
  int32_t sm_major = 9;            // compute capability major; bf16 tensor cores need >= 8
  int32_t pointer_alignment = 16;  // smallest alignment (bytes) of x, W, y and the bias
};

struct GemmPlan {
  bool lt = false;  // cuBLASLt; false: cublasGemmEx
  GemmEpilogue epilogue = GemmEpilogue::kDefault;
  bool bias_kernel = false;  // bias added by a kernel after the GEMM
  GemmActivation activation_kernel = GemmActivation::kNone;  // applied by a kernel afterwards
  float beta = 0.f;
  // Column-major problem: D[rows][cols] = op(A)[rows][depth] · B[depth][cols].
  int64_t rows = 0, cols = 0, depth = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  GemmDType d_type = GemmDType::kF32;
  GemmDType bias_type = GemmDType::kF32;
  int64_t workspace_bytes = 0;
  std::string why;  // why cuBLASLt (or an epilogue) was not used; empty when everything fused
};

// Workspace for cuBLASLt on a device of this compute capability.
int64_t GemmWorkspaceBytes(int32_t sm_major);

// INVALID_ARGUMENT (naming the field and value) for sizes outside [1, 2^31), an activation
// combined with accumulate, or a device below sm_80.
absl::StatusOr<GemmPlan> PlanGemm(const GemmRequest& r);

// Bytes of one element.
inline int64_t GemmDTypeBytes(GemmDType t) { return t == GemmDType::kBF16 ? 2 : 4; }

}  // namespace tandem::gpu
