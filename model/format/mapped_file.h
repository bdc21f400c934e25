// A read-only, private memory mapping of a whole file (RAII: unmapped on destruction).
//
// Pages are loaded lazily, so opening a multi-GB model and reading only its header is cheap.
// Not copyable or movable (spans into the mapping stay valid for the object's lifetime).
// bytes() is safe to read from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

class MappedFile {
 public:
  // NotFound / PermissionDenied / ... (from errno) when the file cannot be opened;
  // InvalidArgument when the path is not a regular file.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;  // null for an empty file
  size_t size_;
};

// True when something exists at `path` (file or directory).
bool PathExists(const std::string& path);

// errno -> absl::Status with `context` (e.g. "open /x/y") prefixed: the one place Tandem's
// model loading translates the errno space.
absl::Status ErrnoStatus(int error_number, absl::string_view context);

}  // namespace tandem
