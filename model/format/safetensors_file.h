// A safetensors file: u64 little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section (offsets are relative to its start). Memory-mapped; the header is
// validated on open: N within the file and at most 100 MB, every tensor's extent inside the
// data section and equal to its shape × dtype size, no overlaps.
//
// Errors: InvalidArgument (malformed), NotFound (missing tensor), Unimplemented (dtype other
// than F32/F16/BF16 when converted). Immutable after Open; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/format/ggml_types.h"
#include "model/format/llama_weights.h"
#include "model/format/mapped_file.h"

namespace tandem {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;   // outermost first
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses an in-memory image (tests). `name` stands in for the path in messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string bytes,
                                                                    std::string name);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return bytes_.size(); }
  // The 8-byte length and the JSON header: everything but tensor data.
  absl::Span<const uint8_t> header_bytes() const { return bytes_.subspan(0, data_offset_); }
  absl::Span<const uint8_t> bytes() const { return bytes_; }

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(absl::string_view name) const;
  absl::Span<const uint8_t> TensorData(const SafetensorsTensor& t) const;
  // F32/F16/BF16 converted to f32.
  absl::StatusOr<Tensor> ReadTensor(absl::string_view name) const;
  // The GGML type standing for t's dtype (F32, F16, BF16); Unimplemented for other dtypes.
  absl::StatusOr<GgmlType> ConvertibleType(const SafetensorsTensor& t) const;

 private:
  SafetensorsFile() = default;
  absl::Status Init(std::string path, absl::Span<const uint8_t> bytes);

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  std::string owned_;
  absl::Span<const uint8_t> bytes_;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace tandem
