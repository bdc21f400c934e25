// Dequantisation of GGML block formats to f32, implemented from the block definitions:
//
//   F32, F16, BF16   one element per "block"
//   Q8_0  32 elems: f16 d, int8 q[32]                     x = d·q
//   Q4_0  32 elems: f16 d, u8 qs[16]                      x[j] = d·(lo(qs[j]) − 8),
//                                                         x[j+16] = d·(hi(qs[j]) − 8)
//   Q4_1  32 elems: f16 d, f16 m, u8 qs[16]               x = d·nibble + m (same nibble order)
//   Q5_0  32 elems: f16 d, u32 qh, u8 qs[16]              x = d·(q5 − 16), q5 = nibble (Q4_0's
//                                                         order) | bit j of qh << 4
//   Q5_1  32 elems: f16 d, f16 m, u32 qh, u8 qs[16]       x = d·q5 + m
//   Q4_K  256 elems: f16 d, f16 dmin, u8 scales[12], u8 qs[128]
//         8 sub-blocks of 32 with 6-bit scale sc and min mn packed in `scales`;
//         x = d·sc·nibble − dmin·mn; qs byte groups of 32 hold sub-block 2i (low nibbles) and
//         2i+1 (high nibbles)
//   Q5_K  256 elems: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//         Q4_K's layout plus a 5th bit: element l of sub-block j takes bit j of qh[l]
//   Q6_K  256 elems: u8 ql[128], u8 qh[64], int8 scales[16], f16 d
//         x = d·scales[i/16]·(q6 − 32), q6 = 4 low bits from ql, 2 high bits from qh
//
// All functions are pure and thread-safe; `src` may be unaligned (it usually points into a
// memory-mapped file).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/format/ggml_types.h"

namespace tandem {

// OK when `src_bytes` bytes of `type` are exactly `numel` elements in whole blocks and Tandem
// can dequantise the type; otherwise Dequantize's error.
[[nodiscard]] absl::Status ValidateDequantize(GgmlType type, int64_t numel, size_t src_bytes);

// Converts src (exactly dst.size() elements of `type`, whole blocks) to f32 in dst.
// Unimplemented for types Tandem cannot dequantise; InvalidArgument on size mismatch.
[[nodiscard]] absl::Status Dequantize(GgmlType type, absl::Span<const uint8_t> src,
                                      absl::Span<float> dst);

// Encodes f32 values as F32, F16, BF16 or Q8_0 (the types the model generator writes).
// Unimplemented for other types; InvalidArgument when src is not whole blocks.
[[nodiscard]] absl::StatusOr<std::string> Quantize(GgmlType type, absl::Span<const float> src);

}  // namespace tandem
