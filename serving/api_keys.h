// The router's API keys (--api_keys_file; docs/security.md): bearer tokens that its public APIs
// (gRPC Router.Generate / ClusterStatus, the OpenAI HTTP API) require, OpenAI style:
// `Authorization: Bearer KEY` (HTTP header, or gRPC metadata `authorization`).
//
// File format: one key per line; blank lines and lines starting with `#` are ignored; surrounding
// whitespace is trimmed. A key is 1-512 printable ASCII characters without spaces.
//
// Only SHA-256 digests of the keys are kept. A presented key is hashed and compared with every
// digest in constant time (no early exit, so timing reveals neither which key nor how much of it
// matched). Keys are never logged: errors name the file and the line number, not the text.
//
// Thread-safety: immutable after Load; Accepts may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem {

class ApiKeys {
 public:
  // NOT_FOUND / PERMISSION_DENIED for a file that cannot be opened; INVALID_ARGUMENT for a line
  // that is not a valid key (by line number) or a file without any key.
  [[nodiscard]] static absl::StatusOr<ApiKeys> Load(const std::string& path);
  // From the text of such a file (`source` names it in errors).
  [[nodiscard]] static absl::StatusOr<ApiKeys> Parse(absl::string_view text,
                                                     absl::string_view source);

  size_t size() const { return digests_.size(); }
  // True when `authorization` (the header's value) is "Bearer KEY" (scheme case-insensitive)
  // with a configured KEY.
  bool Accepts(absl::string_view authorization) const;

 private:
  using Digest = std::array<uint8_t, 32>;
  static Digest Hash(absl::string_view key);
  std::vector<Digest> digests_;
};

// The KEY of "Bearer KEY" (scheme case-insensitive, spaces around KEY trimmed), or nullopt.
std::optional<absl::string_view> BearerToken(absl::string_view authorization);

}  // namespace tandem
