#include "model/cuda/gemm_plan.h"

#include <climits>

#include "absl/strings/str_cat.h"

namespace tandem::gpu {
namespace {

constexpr int64_t kRowAlignment = 16;  // bytes; cuBLASLt's vectorised kernels want 16-byte rows

GemmEpilogue Fused(GemmActivation a, bool bias) {
  switch (a) {
    case GemmActivation::kRelu:
      return bias ? GemmEpilogue::kReluBias : GemmEpilogue::kRelu;
    case GemmActivation::kGelu:
      return bias ? GemmEpilogue::kGeluBias : GemmEpilogue::kGelu;
    default:
      return bias ? GemmEpilogue::kBias : GemmEpilogue::kDefault;
  }
}

}  // namespace

int64_t GemmWorkspaceBytes(int32_t sm_major) {
  return sm_major >= 9 ? int64_t{32} << 20 : int64_t{4} << 20;
}

absl::StatusOr<GemmPlan> PlanGemm(const GemmRequest& r) {
  for (const auto& [name, v] :
       {std::pair<const char*, int64_t>{"m", r.m}, {"n", r.n}, {"k", r.k}}) {
    if (v < 1 || v > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("gemm: ", name, " = ", v, " is outside [1, 2^31)"));
    }
  }
  if (r.accumulate && r.activation != GemmActivation::kNone) {
    return absl::InvalidArgumentError(
        "gemm: accumulate (y += ...) with an activation is not a defined operation");
  }
  if (r.sm_major < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm: sm_major = ", r.sm_major, " (bf16 GEMMs need sm_80 or newer)"));
  }
  if (r.pointer_alignment < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm: pointer_alignment = ", r.pointer_alignment));
  }
  GemmPlan p;
  p.rows = r.n;
  p.cols = r.m;
  p.depth = r.k;
  p.lda = r.k;
  p.ldb = r.k;
  p.ldd = r.n;
  p.d_type = r.out;
  p.bias_type = r.out;
  p.beta = r.accumulate ? 1.f : 0.f;

  const int64_t in_row = r.k * GemmDTypeBytes(GemmDType::kBF16);
  const int64_t out_row = r.n * GemmDTypeBytes(r.out);
  if (in_row % kRowAlignment != 0) {
    p.why = absl::StrCat("k = ", r.k, ": bf16 rows of ", in_row, " bytes are not ", kRowAlignment,
                         "-byte multiples");
  } else if (out_row % kRowAlignment != 0) {
    p.why = absl::StrCat("n = ", r.n, ": output rows of ", out_row, " bytes are not ",
                         kRowAlignment, "-byte multiples");
  } else if (r.pointer_alignment % kRowAlignment != 0) {
    p.why =
        absl::StrCat("pointers aligned to ", r.pointer_alignment, " bytes, not ", kRowAlignment);
  }
  p.lt = p.why.empty();
  if (!p.lt) {
    p.bias_kernel = r.bias;
    p.activation_kernel = r.activation;
    return p;
  }
  p.workspace_bytes = GemmWorkspaceBytes(r.sm_major);
  if (r.activation == GemmActivation::kSilu) {
    // cuBLASLt has no SiLU epilogue: the bias still fuses, SiLU(·up) is a kernel.
    p.epilogue = Fused(GemmActivation::kNone, r.bias);
    p.activation_kernel = GemmActivation::kSilu;
    p.why = "SiLU has no cuBLASLt epilogue";
  } else {
    p.epilogue = Fused(r.activation, r.bias);
  }
  return p;
}

}  // namespace tandem::gpu
