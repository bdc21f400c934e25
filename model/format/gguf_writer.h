// Writes GGUF files (version 2 or 3): metadata in insertion order, then tensor infos and data
// in insertion order, each tensor's data padded to the alignment.
//
// Used by the synthetic model generator and by tests, which also build deliberately broken files
// from its output. Not thread-safe; a writer is filled by one thread, then written.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/format/ggml_types.h"
#include "model/format/gguf_value.h"

namespace tandem {

class GgufWriter {
 public:
  // `alignment` other than the default 32 is recorded as general.alignment (UINT32).
  explicit GgufWriter(uint32_t version = 3, uint32_t alignment = 32);

  // Adds or replaces a metadata entry (a replaced key keeps its original position).
  void Set(std::string key, GgufValue value);

  // Adds a tensor with raw bytes already in `type`'s encoding. shape is outermost first
  // ({out, in} for a matrix). InvalidArgument on a duplicate name, an empty or non-positive
  // shape, or a byte count that does not match shape and type.
  [[nodiscard]] absl::Status AddTensor(std::string name, std::vector<int64_t> shape, GgmlType type,
                                       std::string data);
  // Adds f32 values encoded as `type` (F32, F16, BF16 or Q8_0).
  [[nodiscard]] absl::Status AddF32Tensor(std::string name, std::vector<int64_t> shape,
                                          absl::Span<const float> values, GgmlType type);

  // The complete file image.
  std::string Serialize() const;
  // Writes the file through a temporary next to `path`, renamed into place on success, so a
  // reader never sees a half-written model.
  [[nodiscard]] absl::Status WriteFile(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
    std::string data;
  };

  void Emit(absl::FunctionRef<void(absl::string_view)> sink) const;

  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace tandem
