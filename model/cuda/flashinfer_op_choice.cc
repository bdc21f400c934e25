#include "model/cuda/flashinfer_op_choice.h"

#include "absl/strings/str_cat.h"
#include "model/cuda/flashinfer_rope_fit.h"

namespace tandem::gpu {
namespace {

bool HeadDimSupported(int64_t d) { return d == 64 || d == 128 || d == 256 || d == 512; }

FiOpChoice Ours(std::string reason) {
  FiOpChoice c;
  c.reason = std::move(reason);
  return c;
}

FiOpChoice FlashInfers() {
  FiOpChoice c;
  c.flashinfer = true;
  return c;
}

}  // namespace

const char* FiOpName(FiOp op) {
  switch (op) {
    case FiOp::kRmsNorm:
      return "rmsnorm";
    case FiOp::kRope:
      return "rope";
    case FiOp::kCorrectPartial:
      return "dcp correction";
    case FiOp::kAddRmsNorm:
      return "add + rmsnorm";
  }
  return "?";
}

FiOpChoice ChooseFlashInferOp(bool selected, bool built, const FiOpRequest& r) {
  if (!selected) return Ours("");
  const char* op = FiOpName(r.op);
  if (!built) return Ours(absl::StrCat(op, ": FlashInfer is not built into this binary"));
  switch (r.op) {
    case FiOp::kRmsNorm:
    case FiOp::kAddRmsNorm:
      if (r.bf16) {
        return Ours(absl::StrCat(op,
                                 ": bf16 activations (FlashInfer's RMSNorm takes the weight in the "
                                 "activation dtype; the norm weights are f32)"));
      }
      if (r.cols <= 0 || r.cols % 4 != 0) {
        return Ours(absl::StrCat(op, ": n ", r.cols, " is not a positive multiple of 4"));
      }
      if (r.alignment < 16) return Ours(absl::StrCat(op, ": a pointer is not 16-byte aligned"));
      if (r.op == FiOp::kAddRmsNorm && !r.in_place) {
        return Ours(absl::StrCat(op, ": out is not x (FlashInfer's fused form writes in place)"));
      }
      return FlashInfers();
    case FiOp::kRope: {
      if (r.mscale != 1.f) {
        return Ours(absl::StrCat(op, ": mscale ", r.mscale,
                                 " (FlashInfer's RoPE has no magnitude factor)"));
      }
      if (!HeadDimSupported(r.cols)) {
        return Ours(absl::StrCat(op, ": head_dim ", r.cols, " (64, 128, 256 or 512)"));
      }
      if (r.heads < 2) return Ours(absl::StrCat(op, ": ", r.heads, " head(s) (needs 2 or more)"));
      if (r.alignment < 16) return Ours(absl::StrCat(op, ": x is not 16-byte aligned"));
      FiOpChoice c = FlashInfers();
      if (r.freq_factors != nullptr) {
        absl::StatusOr<FiRopeScaling> fit =
            FitFlashInferRopeScaling(r.freq_factors, static_cast<int32_t>(r.cols), r.theta);
        if (!fit.ok()) return Ours(absl::StrCat(op, ": ", fit.status().message()));
        c.rope = *fit;
      }
      return c;
    }
    case FiOp::kCorrectPartial:
      if (r.bf16) return Ours(absl::StrCat(op, ": bf16 activations"));
      if (!HeadDimSupported(r.cols)) {
        return Ours(absl::StrCat(op, ": head_dim ", r.cols, " (64, 128, 256 or 512)"));
      }
      return FlashInfers();
  }
  return Ours(absl::StrCat("unknown op ", static_cast<int>(r.op)));
}

int32_t MergeItemsPerBlock(int64_t items) {
  int32_t g = 16;
  while (g > 1 && (items <= 0 || items % g != 0)) g /= 2;
  return g;
}

}  // namespace tandem::gpu
