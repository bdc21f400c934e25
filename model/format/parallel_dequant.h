// Dequantisation spread over the calling thread's OpenMP team (common/parallel_for.h), in
// chunks of whole blocks. Same contract and errors as Dequantize (dequant.h).
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/format/ggml_types.h"

namespace tandem {

[[nodiscard]] absl::Status DequantizeParallel(GgmlType type, absl::Span<const uint8_t> src,
                                              absl::Span<float> dst);

}  // namespace tandem
