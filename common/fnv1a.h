// 64-bit FNV-1a: a tiny, fully specified hash whose value is the same in every process, build and
// machine (unlike std::hash / absl::Hash, which are seeded or implementation-defined). Used where
// two processes must compare hashes, e.g. the KV compatibility hash exchanged at handshake.
// Not collision-resistant against an adversary; only for detecting honest mismatches.
#pragma once

#include <cstdint>
#include <string_view>

namespace tandem {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;

// Continues a hash `h` over `bytes`; start from kFnv1a64Offset.
constexpr uint64_t Fnv1a64(std::string_view bytes, uint64_t h = kFnv1a64Offset) {
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= kFnv1a64Prime;
  }
  return h;
}

}  // namespace tandem
