#include "model/format/byte_reader.h"

#include <bit>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem {

// GGUF and safetensors are little-endian; reads are plain memcpy.
static_assert(std::endian::native == std::endian::little, "Tandem assumes a little-endian host");

absl::StatusOr<absl::Span<const uint8_t>> ByteReader::Take(uint64_t n, absl::string_view what) {
  if (n > remaining()) {
    return absl::InvalidArgumentError(absl::StrCat("truncated file: ", what, " needs ", n,
                                                   " bytes at offset ", offset_,
                                                   ", but the file ends at ", size()));
  }
  absl::Span<const uint8_t> out = bytes_.subspan(offset_, n);
  offset_ += n;
  return out;
}

absl::StatusOr<std::string> ByteReader::ReadString(absl::string_view what) {
  const uint64_t at = offset_;
  absl::StatusOr<uint64_t> length = Read<uint64_t>(what);
  if (!length.ok()) return length.status();
  if (*length > remaining()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": string length ", *length, " at offset ",
                                                   at, " exceeds the ", remaining(),
                                                   " bytes left in the file"));
  }
  absl::StatusOr<absl::Span<const uint8_t>> bytes = Take(*length, what);
  if (!bytes.ok()) return bytes.status();
  return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

}  // namespace tandem
