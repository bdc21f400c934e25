// ComputeBackend on the host CPU: oneDNN GEMMs, Tandem's CPU attention and element-wise kernels.
// Each rank thread owns one; all CPU ranks of a process share the device key "cpu", so replicated
// weights are prepared once and shared.
#pragma once

#include <memory>

#include "model/backend.h"

namespace tandem {

std::unique_ptr<ComputeBackend> CreateCpuBackend();

}  // namespace tandem
