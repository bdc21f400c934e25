#include "model/cuda/cuda_backend_options.h"

#include "absl/strings/str_cat.h"

namespace tandem::gpu {

absl::string_view CudaActivationsName(CudaActivations a) {
  return a == CudaActivations::kBF16 ? "bf16" : "f32";
}

absl::StatusOr<CudaBackendOptions> ParseCudaBackendOptions(const char* activations,
                                                           const char* graphs) {
  CudaBackendOptions o;
  const absl::string_view act = activations == nullptr ? "" : activations;
  if (act.empty() || act == "f32") {
    o.activations = CudaActivations::kF32;
  } else if (act == "bf16") {
    o.activations = CudaActivations::kBF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("TANDEM_CUDA_ACTIVATIONS must be f32 or bf16 (got '", act, "')"));
  }
  const absl::string_view g = graphs == nullptr ? "" : graphs;
  if (g.empty() || g == "off") {
    o.graphs = false;
  } else if (g == "on") {
    o.graphs = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("TANDEM_CUDA_GRAPHS must be on or off (got '", g, "')"));
  }
  return o;
}

}  // namespace tandem::gpu
