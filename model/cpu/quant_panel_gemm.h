// The vector paths' kernels for batches of several activation rows (m >= PanelMinRows(), e.g. a
// decode step of 16 sequences): y[m][n] = x[m][k]·Wᵀ (+ b, + the epilogue) like quant_gemv.h's
// Gemv, but each weight is decoded once per call instead of once per few activation rows.
//
// A thread's output rows go in panels of kPanelRows weight rows: the panel is dequantised into a
// per-thread f32 buffer by the path's own DequantRows (quant_gemv.h: dequant.cc's exact values,
// the large-batch path's tiles), then a register-tiled f32 micro-kernel runs every activation row
// over it — NB weight rows × MB activation rows of dot products vectorised along k (12 to 24
// accumulators, enough to cover the FMA latency), the weights and activations loaded once per
// NB·MB FMAs, the sums reduced at the end. The GEMV kernels re-decode every weight for each block
// of 4–8 activation rows and spend a multiply, adds or a block-scale FMA per few useful FMAs;
// here the inner loop is loads and FMAs only, and the decode's cost is spread over all m rows.
//
// Arithmetic: f32 products of the exact dequantised weights. Every output is summed in an order
// set by its own weight row and activation row only: lane l of one accumulator takes
// fma(w[t], x[t], ·) for t = l, l + L, l + 2L, … (L the vector width) in ascending t, then the
// L lanes are added in one fixed tree (pairs, then pairs of pairs, …) — whatever NB × MB block,
// panel or thread computes it and whatever m is. So a sequence gets the same bits in every batch
// this kernel computes (m >= PanelMinRows()); alone or in a smaller batch, the GEMV kernels sum
// in their own (also batch-independent) order, which differs in the last bits.
// quant_linear_test checks both.
//
// Thread-safety: pure functions of their arguments (a thread_local panel buffer); callers split
// the n range across threads.
#pragma once

#include <cstdint>

#include "model/cpu/quant_gemv.h"

namespace tandem::quant::internal {

// The smallest batch the vector paths give to the panel kernels (quant_gemv.cc's GemvOnPath):
// below it the decode is shared by too few rows to pay for the panel's stores and reloads.
// Process-wide; benchmarks and tests move it to compare or pin the kernels.
constexpr int64_t kDefaultPanelMinRows = 6;
int64_t PanelMinRows();
void SetPanelMinRows(int64_t m);

// Weight rows per panel: 12 rows of k = 1536 (SmolLM2's ffn_down) are 72 KiB, in L2 next to the
// activations while every block of activation rows passes over them.
constexpr int64_t kPanelRows = 12;

// Whether the panel kernels take this matrix: k a whole number of 32-element chunks (every
// block type; F16/BF16 rows of another length stay on the GEMV kernels).
constexpr bool PanelSupports(const QuantMatrix& w) { return w.k % 32 == 0; }

// Outputs [n_begin, n_end) of every row of a, on the AVX2 (+ FMA, F16C) or AVX-512 path.
// REQUIRES: PanelSupports(a.w); the path's DequantRows has the type (GemvSupports).
void Avx2PanelGemm(const GemvArgs& a, int64_t n_begin, int64_t n_end);
void Avx512PanelGemm(const GemvArgs& a, int64_t n_begin, int64_t n_end);

}  // namespace tandem::quant::internal
