#include "common/prefix_hash.h"

#include <cstring>

#include "common/fnv1a.h"

namespace tandem {

uint64_t PrefixBlockHash(uint64_t parent, absl::Span<const int32_t> block_tokens) {
  uint64_t h = kFnv1a64Offset;
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((parent >> (8 * i)) & 0xff);
  h = Fnv1a64(std::string_view(bytes, 8), h);
  for (const int32_t t : block_tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>((u >> (8 * i)) & 0xff);
    h = Fnv1a64(std::string_view(bytes, 4), h);
  }
  return h;
}

std::vector<uint64_t> PrefixHashChain(uint64_t salt, absl::Span<const int32_t> tokens,
                                      int64_t block_tokens) {
  std::vector<uint64_t> chain;
  if (block_tokens <= 0) return chain;
  const int64_t full = static_cast<int64_t>(tokens.size()) / block_tokens;
  chain.reserve(static_cast<size_t>(full));
  uint64_t parent = salt;
  for (int64_t b = 0; b < full; ++b) {
    parent = PrefixBlockHash(parent, tokens.subspan(static_cast<size_t>(b * block_tokens),
                                                    static_cast<size_t>(block_tokens)));
    chain.push_back(parent);
  }
  return chain;
}

uint64_t PrefixSalt(std::string_view kv_identity) {
  return Fnv1a64(kv_identity, Fnv1a64("tandem prefix cache v1\n"));
}

}  // namespace tandem
