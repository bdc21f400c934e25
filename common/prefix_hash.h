// The prefix-cache hash chain: one 64-bit hash per full block of a prompt, each hash covering the
// block's token ids and (through its parent) every token before it. A prefill instance keys its
// cached KV blocks by these hashes; it publishes `salt` and `block_tokens` with the hashes it holds
// (InstanceStatus.prefix_cache), so the router can hash a prompt the same way and score instances
// by the cached prefix length without knowing how the salt was made.
//
// The hashes are a lookup key and a routing hint, not a proof: FNV-1a is not collision-resistant,
// so a cache hit must still compare the block's token ids before reusing its KV.
// Pure; the same values in every process, build and machine.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace tandem {

// The hash of one block given its parent's hash (the salt for the first block).
[[nodiscard]] uint64_t PrefixBlockHash(uint64_t parent, absl::Span<const int32_t> block_tokens);

// Hashes of the full blocks of `tokens` (a trailing partial block has none), in order:
// result[i] covers tokens [0, (i + 1) * block_tokens). block_tokens must be > 0.
[[nodiscard]] std::vector<uint64_t> PrefixHashChain(uint64_t salt, absl::Span<const int32_t> tokens,
                                                    int64_t block_tokens);

// A salt from everything that makes two instances' KV for the same tokens differ (model id, KV
// layout, dtype, ...), given as one descriptive string by the caller.
[[nodiscard]] uint64_t PrefixSalt(std::string_view kv_identity);

}  // namespace tandem
