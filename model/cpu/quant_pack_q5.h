// The GEMV kernels' row layout for Q5_0 and Q5_1 (quant_gemv.h PackRows): every 5-bit quant in
// one field of a 32-bit lane, so a kernel gets 16 quants with one shift (or one AND) of a
// 64-byte vector instead of merging a nibble with a fifth bit from a separate mask.
//
// A row of B blocks (32 elements each) is ceil(B / 3) groups of 64 bytes — 16 little-endian
// u32 lanes — then the block scales as f32 (Q5_0: d per block; Q5_1: d and m interleaved).
// Lane j of group g holds six 5-bit fields: field f (bits 5f .. 5f + 4, f = 0..5) is the quant
// of element 16f + j of the group, i.e. of element 16·(f % 2) + j of block 3g + f / 2. A last
// group of 1 or 2 blocks leaves its upper fields zero. The quants are the file's (nibble | fifth
// bit << 4), moved; f16 → f32 is exact, so the weights are the same. Bytes per 32 weights:
// 21⅓ + 4 (Q5_0, +15% over the file's 22) or + 8 (Q5_1, +22% over 24).
//
// Why 5-bit fields: the AVX-512 kernel indexes a 32-entry table of the block's weights with the
// low 5 bits of each lane (one two-table permute per 16 weights); the AVX2 kernel masks field f
// in place, leaving q·2^{5f} (five significant bits, exact in f32 for f <= 5).
//
// Pure functions; no I/O.
#pragma once

#include <cstdint>

#include "model/format/ggml_types.h"

namespace tandem::quant {

inline constexpr int64_t kQ5GroupBlocks = 3;
inline constexpr int64_t kQ5GroupBytes = 64;

// Scales per block in the packed layout: 1 (Q5_0) or 2 (Q5_1).
constexpr int Q5Scales(GgmlType type) { return type == GgmlType::kQ5_1 ? 2 : 1; }

constexpr int64_t Q5Groups(int64_t blocks) {
  return (blocks + kQ5GroupBlocks - 1) / kQ5GroupBlocks;
}

// Bytes of a packed row of k elements (k a multiple of 32).
constexpr int64_t Q5PackedRowBytes(GgmlType type, int64_t k) {
  return Q5Groups(k / 32) * kQ5GroupBytes + k / 32 * 4 * Q5Scales(type);
}

// One row: src in the file's layout (k / 32 blocks of 22 or 24 bytes) into dst
// (Q5PackedRowBytes).
void PackQ5Row(GgmlType type, const uint8_t* src, int64_t k, uint8_t* dst);

// One packed row as f32 (k floats), with model/format/dequant.cc's arithmetic.
void UnpackQ5Row(GgmlType type, const uint8_t* row, int64_t k, float* out);

}  // namespace tandem::quant
