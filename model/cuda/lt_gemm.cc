#include "model/cuda/lt_gemm.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"
#include "model/cuda/cuda_linear.h"

namespace tandem::gpu {
namespace {

cudaDataType_t CudaType(GemmDType t) { return t == GemmDType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

cublasLtEpilogue_t LtEpilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kRelu:
      return CUBLASLT_EPILOGUE_RELU;
    case GemmEpilogue::kReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::kGelu:
      return CUBLASLT_EPILOGUE_GELU;
    case GemmEpilogue::kGeluBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::kDefault:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Largest power of two (<= 256, cuBLASLt's default assumption) dividing the address.
uint32_t AlignmentOf(const void* p) {
  uint32_t a = 256;
  const auto v = reinterpret_cast<uintptr_t>(p);
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

bool HasBias(GemmEpilogue e) {
  return e == GemmEpilogue::kBias || e == GemmEpilogue::kReluBias || e == GemmEpilogue::kGeluBias;
}

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PrefDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using Desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Pref = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDeleter>;

absl::StatusOr<Layout> MakeLayout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  TANDEM_RETURN_IF_ERROR(ToStatus(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows),
                                                             static_cast<uint64_t>(cols), ld),
                                  "cublasLtMatrixLayoutCreate"));
  return Layout(l);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(int32_t device, cudaStream_t stream) {
  const ScopedDevice scope(device);
  TANDEM_RETURN_IF_ERROR(scope.status());
  int major = 0;
  TANDEM_RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CudaDeviceBuffer> ws,
                          CudaDeviceBuffer::Create(device, GemmWorkspaceBytes(major)));
  cublasLtHandle_t h = nullptr;
  TANDEM_RETURN_IF_ERROR(ToStatus(cublasLtCreate(&h), "cublasLtCreate"));
  return std::unique_ptr<LtGemm>(new LtGemm(device, stream, major, h, std::move(ws)));
}

LtGemm::~LtGemm() {
  const ScopedDevice scope(device_);
  cublasLtDestroy(handle_);
}

absl::Status LtGemm::Run(const GemmPlan& plan, const void* w, const void* x, void* y,
                         const void* bias) {
  if (!plan.lt) return absl::InvalidArgumentError("lt_gemm: the plan is not a cuBLASLt plan");
  if (plan.workspace_bytes > workspace_->bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("lt_gemm: the plan wants ", plan.workspace_bytes,
                                                   " workspace bytes, ", workspace_->bytes(),
                                                   " are allocated"));
  }
  if (HasBias(plan.epilogue) != (bias != nullptr)) {
    return absl::InvalidArgumentError("lt_gemm: a bias pointer iff the epilogue has a bias");
  }
  const std::string what = absl::StrCat("cuBLASLt bf16 [", plan.cols, "x", plan.depth, "]x[",
                                        plan.depth, "x", plan.rows, "]");
  cublasLtMatmulDesc_t d = nullptr;
  TANDEM_RETURN_IF_ERROR(
      ToStatus(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), what));
  Desc desc(d);
  const cublasOperation_t trans = CUBLAS_OP_T;
  const cublasLtEpilogue_t epilogue = LtEpilogue(plan.epilogue);
  TANDEM_RETURN_IF_ERROR(ToStatus(
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)), what));
  TANDEM_RETURN_IF_ERROR(ToStatus(
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
      what));
  if (bias != nullptr) {
    TANDEM_RETURN_IF_ERROR(ToStatus(
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
        what));
  }
  // A = W read column-major as [k][n] (transposed by TRANSA), B = x as [k][m], C = D = yᵀ [n][m].
  TANDEM_ASSIGN_OR_RETURN(Layout a, MakeLayout(CUDA_R_16BF, plan.depth, plan.rows, plan.lda));
  TANDEM_ASSIGN_OR_RETURN(Layout b, MakeLayout(CUDA_R_16BF, plan.depth, plan.cols, plan.ldb));
  TANDEM_ASSIGN_OR_RETURN(Layout c,
                          MakeLayout(CudaType(plan.d_type), plan.rows, plan.cols, plan.ldd));
  // The heuristic assumes 256-byte aligned matrices unless told otherwise.
  const uint32_t align[4] = {AlignmentOf(w), AlignmentOf(x), AlignmentOf(y), AlignmentOf(y)};
  const AlgoKey key =
      std::make_tuple(plan.rows, plan.cols, plan.depth, static_cast<uint8_t>(plan.epilogue),
                      static_cast<uint8_t>(plan.d_type), plan.beta != 0.f,
                      std::min({align[0], align[1], align[2]}));
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    cublasLtMatmulPreference_t p = nullptr;
    TANDEM_RETURN_IF_ERROR(ToStatus(cublasLtMatmulPreferenceCreate(&p), what));
    Pref pref(p);
    const uint64_t ws = static_cast<uint64_t>(plan.workspace_bytes);
    TANDEM_RETURN_IF_ERROR(
        ToStatus(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ws, sizeof(ws)),
                 what));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i) {
      TANDEM_RETURN_IF_ERROR(ToStatus(
          cublasLtMatmulPreferenceSetAttribute(p, align_attr[i], &align[i], sizeof(align[i])),
          what));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    TANDEM_RETURN_IF_ERROR(
        ToStatus(cublasLtMatmulAlgoGetHeuristic(handle_, d, a.get(), b.get(), c.get(), c.get(), p,
                                                1, &result, &found),
                 absl::StrCat(what, ": heuristic")));
    if (found < 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": cuBLASLt has no algorithm"));
    }
    if (algos_.size() >= kMaxCachedAlgos) algos_.clear();
    it = algos_.emplace(key, result.algo).first;
  }
  const float alpha = 1.f;
  const float beta = plan.beta;
  const ScopedDevice scope(device_);
  TANDEM_RETURN_IF_ERROR(scope.status());
  return ToStatus(cublasLtMatmul(handle_, d, &alpha, w, a.get(), x, b.get(), &beta, y, c.get(), y,
                                 c.get(), &it->second, workspace_->data(),
                                 static_cast<size_t>(workspace_->bytes()), stream_),
                  what);
}

}  // namespace tandem::gpu
