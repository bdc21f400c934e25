// ComputeBackend on the host CPU: oneDNN GEMMs, Tandem's CPU attention and element-wise kernels.
// Each rank thread owns one; all CPU ranks of a process share the device key "cpu", so replicated
// weights are prepared once and shared.
#pragma once

#include <memory>

#include "model/backend.h"

namespace tandem {

std::unique_ptr<ComputeBackend> CreateCpuBackend();

// Whether LinearAdd / LinearSiluMul fuse their element-wise work into the GEMM (the default) or
// run a plain GEMM followed by a separate Add / SiluMul pass. Process-wide; for the benchmark
// that reports the GEMM share of prefill time with and without the epilogues.
void SetCpuEpilogueFusion(bool fused);

}  // namespace tandem
