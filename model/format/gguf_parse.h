// Parser for the GGUF container (versions 2 and 3) over an in-memory file image.
//
// Layout: "GGUF" magic, u32 version, u64 tensor count, u64 metadata count; metadata as
// (string key, u32 value type, value); tensor infos as (string name, u32 n_dims, u64 dims[n_dims]
// with dims[0] the contiguous extent, u32 GGML type, u64 offset); zero padding to the alignment
// (`general.alignment`, default 32); then the data section. Tensor offsets are relative to the
// data section and must be multiples of the alignment.
//
// The parser validates everything it returns: counts and lengths are bounded by the bytes left
// in the file before anything is allocated, every tensor's extent lies inside the file, tensors
// do not overlap, and names/keys are unique. Every failure is InvalidArgument (malformed) or
// Unimplemented (well-formed but unsupported, e.g. another GGUF version) with a message naming
// the field. Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/format/ggml_types.h"
#include "model/format/gguf_value.h"

namespace tandem {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: dims[0] (ne0) is the contiguous extent
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // bytes from the start of the data section
  uint64_t nbytes = 0;
  int64_t numel = 0;

  // Outermost first, as Tensor::shape: a GGUF matrix with ne0 = in, ne1 = out is {out, in}.
  std::vector<int64_t> Shape() const { return {dims.rbegin(), dims.rend()}; }
};

struct GgufContents {
  uint32_t version = 3;
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // absolute file offset of the data section
  std::vector<std::pair<std::string, GgufValue>> metadata;  // file order
  std::vector<GgufTensorInfo> tensors;                      // file order
};

// Parses and validates the header of `file` (the whole file image; tensor data is not read).
[[nodiscard]] absl::StatusOr<GgufContents> ParseGguf(absl::Span<const uint8_t> file);

}  // namespace tandem
