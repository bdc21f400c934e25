#include "serving/api_keys.h"

#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem {
namespace {

constexpr size_t kMaxKeyLength = 512;

bool ValidKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxKeyLength) return false;
  for (char c : key) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

std::optional<absl::string_view> BearerToken(absl::string_view authorization) {
  authorization = absl::StripAsciiWhitespace(authorization);
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  return absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
}

ApiKeys::Digest ApiKeys::Hash(absl::string_view key) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), d.data());
  return d;
}

absl::StatusOr<ApiKeys> ApiKeys::Parse(absl::string_view text, absl::string_view source) {
  ApiKeys keys;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    if (!ValidKey(line)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--api_keys_file=", source, " line ", line_number,
                       ": not a valid key (1-512 printable ASCII characters, no spaces)"));
    }
    keys.digests_.push_back(Hash(line));
  }
  if (keys.digests_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--api_keys_file=", source, " holds no key (one per line, # comments)"));
  }
  return keys;
}

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int err = errno;
    const std::string what =
        absl::StrCat("--api_keys_file=", path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(what);
    if (err == EACCES) return absl::PermissionDeniedError(what);
    return absl::InternalError(what);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return Parse(ss.str(), path);
}

bool ApiKeys::Accepts(absl::string_view authorization) const {
  const std::optional<absl::string_view> token = BearerToken(authorization);
  // A malformed header is still hashed and compared, so its timing matches a wrong key's.
  const Digest presented = Hash(token.value_or(absl::string_view()));
  uint8_t any_match = 0;
  for (const Digest& d : digests_) {
    uint8_t diff = 0;
    for (size_t i = 0; i < d.size(); ++i) diff |= static_cast<uint8_t>(d[i] ^ presented[i]);
    any_match |= static_cast<uint8_t>(diff == 0);
  }
  return token.has_value() && !token->empty() && any_match != 0;
}

}  // namespace tandem
