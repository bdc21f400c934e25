// Dequantisation spread over the calling thread's OpenMP team (common/parallel_for.h).
//
// DequantizeAll converts many tensors in one parallel region: first every destination is
// allocated (in parallel, so page faults are shared out), then all tensors are cut into chunks
// of whole blocks and the chunks are converted. One fork/join per model instead of one per
// tensor matters on a loaded machine, where OpenMP's spinning barriers are expensive.
// Same contract and errors as Dequantize (dequant.h).
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/format/ggml_types.h"
#include "model/format/llama_weights.h"

namespace tandem {

struct DequantJob {
  GgmlType type;
  absl::Span<const uint8_t> src;
  std::vector<int64_t> shape;  // outermost first; dst gets this shape
  Tensor* dst;
};

// Validates every job first (sizes, dequantisable types), then converts them all.
[[nodiscard]] absl::Status DequantizeAll(absl::Span<const DequantJob> jobs);

[[nodiscard]] absl::Status DequantizeParallel(GgmlType type, absl::Span<const uint8_t> src,
                                              absl::Span<float> dst);

}  // namespace tandem
