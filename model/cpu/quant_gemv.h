// Small-batch linear layers straight from GGML block formats: y[m][n] = x[m][k]·Wᵀ (+ b, + an
// epilogue) with W kept as the file stores it (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K,
// F16, BF16; the 5-bit types in quant_gemv_q5.h).
//
// Each kernel loads a weight row's blocks, expands every 32-element chunk to f32 in vector
// registers with exactly the arithmetic of model/format/dequant.cc (so the weights it multiplies
// by are bit-identical to the dequantised model's), and accumulates the dot products in f32
// with FMAs. Only the summation order differs from a GEMM on the dequantised matrix. Weight
// rows are decoded once per block of up to 8 (AVX-512) or 2 (AVX2) activation rows, so batched
// decode re-reads a row from cache, not memory. One exception: the AVX2 path's packed Q4_0, Q4_1
// and Q8_0 kernel factors each block's scale out of its dot product, d·Σq·x + o·Σx
// (quant_gemv_avx2_factored.h: the same real numbers, rounded in another place; AVX2 has no
// 16-entry permute to expand weights cheaply), and so do its Q4_K kernel per 32-weight
// sub-block (quant_gemv_avx2_q4k.h, Q5_K: _q5k.h), its Q6_K kernel per 16-weight sub-block
// (quant_gemv_avx2_q6k.h) and its packed Q5_0/Q5_1 kernel (quant_gemv_avx2_q5.h); the AVX-512
// path factors Q4_K, Q5_K and Q6_K the same way (quant_gemv_avx512_kquants.h). Every kernel sums an
// output in an order set by its own weight row and activation row, so results do not depend on the
// batch size within a kernel.
//
// Batches of several rows (m >= internal::PanelMinRows(), 6 by default) take the panel kernels on
// the vector paths instead (quant_panel_gemm.h): each weight dequantised once per call, exactly,
// into a per-thread f32 panel, then a register-tiled f32 micro-kernel over all m rows. Their sums
// are also independent of the batch size, in an order of their own: a sequence gets the same bits
// in any batch of 6 or more, and (in the last bits) other ones alone or in a batch of 2 to 5.
//
// Paths: AVX-512 (F, BW, VL + FMA, F16C), AVX2 (+ FMA, F16C) and portable C++ (dequantise a row,
// then dot), picked by attention/cpu/cpu_isa.h's ActiveCpuIsa() — tests pin each path in turn.
//
// Thread-safety: pure functions of their arguments; callers split the n range across threads.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/cpu/cpu_isa.h"
#include "model/format/ggml_types.h"

namespace tandem::quant {

// What happens to each result v = x·w_nᵀ + b_n before it is stored.
enum class Epilogue : uint8_t {
  kStore,       // y = v
  kAccumulate,  // y += v (a residual add)
  kSiluMul,     // y = silu(v) · aux, aux [m][n]
};

// A row-major weight matrix of n rows, each k elements of `type` in row_bytes bytes.
// packed: the row layout of PackRows (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 only), else the file's
// blocks.
struct QuantMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t n = 0;
  int64_t k = 0;
  int64_t row_bytes = 0;
  bool packed = false;
};

// The kernels' layout for Q4_0, Q4_1 and Q8_0 rows: the quants of every block back to back
// (16 or 32 bytes per block), then the block scales as f32 (Q4_1: d and m interleaved). f16 → f32
// is exact, so the weights are the same; what changes is that the kernel broadcasts a scale
// straight from memory instead of converting an f16 per block. Costs 4–8 bytes per 32 weights
// more than the file (Q4_1 +20%, Q8_0 +6%).
//
// 4-bit quants are moreover transposed into "lane groups" of G = 4, 2 or 1 blocks (LaneGroupOf):
// 16 lanes of G bytes, lane j's byte b being byte j of the group's block b — so nibble t of lane
// j is the quant of element 16t + j of the group. One 64-byte load then holds four blocks' quants
// as 16 dwords whose low nibbles, after a shift by 4t, index a 16-entry table with one permute
// per 16 weights (the file's byte order needs a byte → dword widening per 16 weights on the same
// shuffle port). G = 1 is the file's own order. The quants are the same bytes, moved.
//
// Q5_0 and Q5_1 rows have their own packed layout: 5-bit fields in 32-bit lanes, groups of three
// blocks (quant_pack_q5.h).
bool PackSupports(GgmlType type);
int64_t PackedRowBytes(GgmlType type, int64_t k);
// rows: n rows in the file's layout; returns n rows of PackedRowBytes.
std::vector<uint8_t> PackRows(GgmlType type, const uint8_t* rows, int64_t n, int64_t k);

// The lane group holding block c of a packed 4-bit row of `blocks` blocks: groups of 4 blocks
// from the start, then one of 2 and/or one of 1 for the remainder. Its quants start at byte
// 16 · *first of the row.
constexpr void LaneGroupOf(int64_t c, int64_t blocks, int64_t* first, int* g) {
  const int64_t full = blocks & ~int64_t{3};
  if (c < full) {
    *first = c & ~int64_t{3};
    *g = 4;
  } else if ((blocks & 2) != 0 && c < full + 2) {
    *first = full;
    *g = 2;
  } else {
    *first = c;
    *g = 1;
  }
}

struct GemvArgs {
  QuantMatrix w;
  const float* x = nullptr;  // [m][k]
  int64_t m = 0;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [m][n]
  Epilogue epilogue = Epilogue::kStore;
  const float* aux = nullptr;  // [m][n] for kSiluMul
};

// Types the kernels read directly.
bool GemvSupports(GgmlType type);

// Computes outputs [n_begin, n_end) of every row of `a` on the active ISA path.
// REQUIRES: GemvSupports(a.w.type); k a whole number of the type's blocks.
void Gemv(const GemvArgs& a, int64_t n_begin, int64_t n_end);

// The same on one path (isa must be supported by this CPU).
void GemvOnPath(CpuIsa isa, const GemvArgs& a, int64_t n_begin, int64_t n_end);

// Rows [n_begin, n_end) of w as f32 into out ([n_end − n_begin][k]) on the active / a given path:
// equal to model/format/dequant.cc's values (the large-batch path's tiles).
void DequantRows(const QuantMatrix& w, int64_t n_begin, int64_t n_end, float* out);
void DequantRowsOnPath(CpuIsa isa, const QuantMatrix& w, int64_t n_begin, int64_t n_end,
                       float* out);

namespace internal {
using GemvFn = void (*)(const GemvArgs& a, int64_t n_begin, int64_t n_end);
using DequantFn = void (*)(const QuantMatrix& w, int64_t n_begin, int64_t n_end, float* out);
// Per-path entry points; null when the type has no kernel on that path.
GemvFn Avx512Gemv(GgmlType type, bool packed);
GemvFn Avx2Gemv(GgmlType type, bool packed);
DequantFn Avx512Dequant(GgmlType type, bool packed);
DequantFn Avx2Dequant(GgmlType type, bool packed);
void PortableGemv(const GemvArgs& a, int64_t n_begin, int64_t n_end);
void PortableDequant(const QuantMatrix& w, int64_t n_begin, int64_t n_end, float* out);
// The scalar epilogue, compiled once without ISA flags (no AVX-512 copy of an inline function
// can be picked by the linker). The kernels apply it to kStore and kAccumulate; kSiluMul only
// on the portable path — GemvOnPath runs the AVX-512 and AVX2 kernels with kStore and then
// cpu::SiluMulOnPath over the outputs (model/cpu/cpu_ops.h: a vectorised exp, a few ulp from
// std::exp).
float ApplyEpilogue(Epilogue e, float v, float old_y, float aux);
}  // namespace internal

}  // namespace tandem::quant
