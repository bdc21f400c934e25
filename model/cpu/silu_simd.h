// SiLU(gate)·up with a vectorised exp, one translation unit per instruction set (each compiled
// with its own flags: silu_avx512.cc, silu_avx2.cc); call a path only when the CPU has it
// (cpu_ops.h's SiluMulOnPath checks nothing, its callers pass ActiveCpuIsa()).
//
// Both paths compute e^-g as 2^n·p(r) (r = -g − n·ln2, |r| <= ln2/2, p the degree-7 Taylor
// polynomial, relative error < 2e-8) and then g / (1 + e^-g) · up: within a few ulp of the
// scalar formula with std::exp. Elements that do not fill a whole vector go through the same
// vector code (padded), so every element's result is the same whatever range it is computed in
// — how a loop is split over threads, or a GEMV's rows over tiles, never changes a bit.
#pragma once

#include <cstdint>

namespace tandem::cpu {

// out[i] = gate[i] / (1 + e^-gate[i]) · up[i] for i in [begin, end). out may alias gate or up.
void SiluMulAvx512(const float* gate, const float* up, int64_t begin, int64_t end, float* out);
void SiluMulAvx2(const float* gate, const float* up, int64_t begin, int64_t end, float* out);

}  // namespace tandem::cpu
