// SiLU(gate)·up with AVX-512 (vectorised exp), compiled with AVX-512 flags in its own file; call
// only when the CPU has AVX-512F (cpu_ops.cc checks). Results match the scalar formula to a few
// ulp.
#pragma once

#include <cstdint>

namespace tandem::cpu {

// out[i] = gate[i] / (1 + e^-gate[i]) · up[i] for i in [begin, end).
void SiluMulAvx512(const float* gate, const float* up, int64_t begin, int64_t end, float* out);

}  // namespace tandem::cpu
