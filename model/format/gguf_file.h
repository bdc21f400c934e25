// An open GGUF file: validated header (metadata + tensor infos) over a memory-mapped image.
//
// Opening parses only the header; tensor bytes are paged in when read, so reading metadata
// (e.g. for a tokenizer) is cheap. Typed metadata getters fail with NotFound ("missing metadata
// key 'k'") or InvalidArgument ("metadata key 'k' has type X, expected Y").
//
// Immutable after Open; all methods are safe to call from several threads. Spans returned by
// TensorData point into the mapping and live as long as the GgufFile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/format/gguf_parse.h"
#include "model/format/gguf_value.h"
#include "model/format/llama_weights.h"
#include "model/format/mapped_file.h"

namespace tandem {

class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (tests, tools). `name` stands in for the path in messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string bytes, std::string name);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return bytes_.size(); }
  // The whole file image.
  absl::Span<const uint8_t> bytes() const { return bytes_; }
  const GgufContents& contents() const { return contents_; }
  uint32_t version() const { return contents_.version; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const {
    return contents_.metadata;
  }
  // Null when absent.
  const GgufValue* Find(absl::string_view key) const;
  bool Has(absl::string_view key) const { return Find(key) != nullptr; }

  absl::StatusOr<absl::string_view> GetString(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;   // any integer type
  absl::StatusOr<double> GetFloat(absl::string_view key) const;  // FLOAT32 / FLOAT64
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<absl::Span<const std::string>> GetStringArray(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(absl::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return contents_.tensors; }
  // Null when absent.
  const GgufTensorInfo* FindTensor(absl::string_view name) const;
  // The raw bytes of a tensor of this file.
  absl::Span<const uint8_t> TensorData(const GgufTensorInfo& info) const;
  // Dequantises one tensor to f32 (shape outermost first). NotFound when absent.
  absl::StatusOr<Tensor> ReadTensor(absl::string_view name) const;

 private:
  GgufFile() = default;
  absl::Status Init(std::string path, absl::Span<const uint8_t> bytes);
  absl::StatusOr<const GgufValue*> Require(absl::string_view key) const;

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;  // or:
  std::string owned_;                    // the image, for FromBytes
  absl::Span<const uint8_t> bytes_;
  GgufContents contents_;
  absl::flat_hash_map<std::string, size_t> key_index_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace tandem
