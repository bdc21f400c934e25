// GGML tensor element types as stored in GGUF files: ids, block geometry and names.
//
// A GGML tensor row of ne0 elements is stored as ne0 / block_size blocks of block_bytes each;
// ne0 must be a multiple of block_size. The table covers every type whose geometry Tandem
// knows, so a file holding types we cannot dequantise still parses (its metadata, e.g. the
// tokenizer, stays usable) and fails only when such a tensor is converted.
//
// Pure functions over constant tables; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

struct GgmlTypeInfo {
  GgmlType type;
  absl::string_view name;  // as ggml prints it: "F32", "Q4_K", ...
  int64_t block_size;      // elements per block
  int64_t block_bytes;     // bytes per block
  bool dequantizable;      // Tandem can convert it to f32
};

// The traits of a raw type id read from a file, or null when the id is unknown.
const GgmlTypeInfo* FindGgmlType(uint32_t id);

// Traits of a known type (never null for an enumerator above).
const GgmlTypeInfo& GgmlTypeTraits(GgmlType type);

absl::string_view GgmlTypeName(GgmlType type);

// Bytes taken by `numel` elements of `type`. InvalidArgument when numel is not a multiple of the
// block size or the size overflows int64.
absl::StatusOr<int64_t> GgmlByteSize(GgmlType type, int64_t numel);

}  // namespace tandem
