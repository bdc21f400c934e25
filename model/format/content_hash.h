// A stable 64-bit content hash (FNV-1a) for model identities. Unlike absl::Hash it is the same
// in every process and build, which the KV compatibility check between nodes requires.
// Not cryptographic. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

class ContentHash {
 public:
  void Add(absl::Span<const uint8_t> bytes);
  void Add(absl::string_view bytes);
  void AddU64(uint64_t v);
  uint64_t value() const { return state_; }
  std::string Hex() const;  // 16 lowercase hex digits

 private:
  uint64_t state_ = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
};

// Adds `samples` evenly spaced windows of up to `window` bytes of `data` (all of it when small).
void AddSampled(absl::Span<const uint8_t> data, int samples, size_t window, ContentHash* hash);

}  // namespace tandem
