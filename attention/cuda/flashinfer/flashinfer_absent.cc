// The FlashInfer entry points of a build without FlashInfer's headers (flashinfer_attention.h,
// flashinfer_backend_ops.h): FlashInferBuilt() is false and every launch is UNIMPLEMENTED saying
// how to build it.
#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "attention/cuda/flashinfer/flashinfer_backend_ops.h"

namespace tandem::gpu {
namespace {

absl::Status NotBuilt() {
  return absl::UnimplementedError(
      "flashinfer: not built into this binary (run deploy/fetch-flashinfer.sh, then re-run cmake "
      "with the CUDA backend on; docs/gpu.md#flashinfer)");
}

}  // namespace

bool FlashInferBuilt() { return false; }

int64_t FlashInferScratchBytes(const PoolGeometry&, int32_t, int64_t,
                               const flashinfer_plan::DecodeWork&) {
  return 0;
}

absl::Status LaunchFlashInferAttention(const FlashInferAttentionArgs&, void*) { return NotBuilt(); }

int64_t FlashInferMergeScratchFloats(int32_t, int64_t) { return 0; }

absl::Status LaunchFlashInferMerge(int32_t, const float*, const float*, int64_t, int32_t, float*,
                                   float*, float*, void*) {
  return NotBuilt();
}

absl::Status LaunchFlashInferRmsNorm(const float*, const float*, int64_t, int64_t, float, float*,
                                     void*) {
  return NotBuilt();
}

absl::Status LaunchFlashInferAddRmsNorm(float*, float*, const float*, int64_t, int64_t, float,
                                        void*) {
  return NotBuilt();
}

absl::Status LaunchFlashInferRope(float*, float*, int64_t, int32_t, int32_t, int32_t,
                                  const int32_t*, float, bool, void*) {
  return NotBuilt();
}

absl::Status LaunchFlashInferRopeInPlace(float*, int64_t, int32_t, int32_t, const int64_t*, float,
                                         bool, const FiRopeScaling&, void*) {
  return NotBuilt();
}

absl::Status LaunchFlashInferRopeInPlaceBf16(uint16_t*, int64_t, int32_t, int32_t, const int64_t*,
                                             float, bool, const FiRopeScaling&, void*) {
  return NotBuilt();
}

absl::Status LaunchFlashInferCorrectPartial(int32_t, int32_t, const float*, int64_t, int32_t,
                                            float*, const float*, float*, int32_t, void*) {
  return NotBuilt();
}

}  // namespace tandem::gpu
