// Bounds-checked little-endian cursor over a byte span (a GGUF or safetensors file image).
//
// Every read checks the remaining length first and fails with InvalidArgument naming what was
// being read, its offset and the file size, so truncated or lying files never read out of
// bounds. Strings are GGUF strings (u64 length + bytes). Does not own the bytes; not
// thread-safe (one cursor per parse).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

class ByteReader {
 public:
  explicit ByteReader(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t offset() const { return offset_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - offset_; }

  // The next n bytes, advancing past them.
  absl::StatusOr<absl::Span<const uint8_t>> Take(uint64_t n, absl::string_view what);

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    absl::StatusOr<absl::Span<const uint8_t>> bytes = Take(sizeof(T), what);
    if (!bytes.ok()) return bytes.status();
    T v;
    std::memcpy(&v, bytes->data(), sizeof(T));
    return v;
  }

  // A GGUF string: u64 byte length, then the bytes. A length past the end of the file is
  // reported as such (never allocated).
  absl::StatusOr<std::string> ReadString(absl::string_view what);

 private:
  absl::Span<const uint8_t> bytes_;
  uint64_t offset_ = 0;
};

}  // namespace tandem
