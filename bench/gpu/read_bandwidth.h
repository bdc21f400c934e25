// The device's read bandwidth, measured: a kernel that streams a buffer much larger than L2 with
// 16-byte loads and reduces it (so nothing is optimised away); best of `repeats` timed runs
// (CUDA events), after one warm-up. The limit the GPU benchmarks divide by, measured in the
// same run as what they compare with it.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace tandem::bench {

// Bytes per second. INVALID_ARGUMENT for bytes < 1 MiB or repeats < 1; CUDA errors as Status.
absl::StatusOr<double> MeasureReadBandwidth(int32_t device, int64_t bytes, int32_t repeats);

}  // namespace tandem::bench
