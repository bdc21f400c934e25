// Element-wise math with AVX-512 (vectorised exp), compiled with AVX-512 flags in its own file;
// call only when the CPU has AVX-512F (callers check). Results match the scalar formulas to a
// few ulp.
#pragma once

#include <cstdint>

namespace tandem::cpu {

// out[i] = gate[i] / (1 + e^-gate[i]) · up[i] for i in [begin, end).
void SiluMulAvx512(const float* gate, const float* up, int64_t begin, int64_t end, float* out);

// x[i] = e^(x[i] − shift) for i in [0, n); returns Σ x[i] (after the update).
float ExpShiftSumAvx512(float* x, int64_t n, float shift);

}  // namespace tandem::cpu
