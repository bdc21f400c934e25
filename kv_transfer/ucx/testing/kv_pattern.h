// Test/benchmark support: a KV pool content where every element says what it is, so a transfer
// between two layouts can be verified byte for byte without trusting the planner.
//
// Element (global KV head h, layer l, K|V k, token position p, dim d) holds the low
// KvDTypeBytes(dtype) bytes of RowCode(h, l, k, p) + d·0x9e3779b9. Bytes no element claims hold
// kPoison. Pools use the docs/design.md#kv-pool-layout layout of the given rank (RankPoolGeometry)
// and the request's virtual block table (shared by all ranks of an instance, DCP ownership:
// docs/design.md#token-ownership).
// Thread-safety: free functions over their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kv_transfer/transfer_types.h"

namespace tandem::testing {

inline constexpr std::byte kPoison{0xa5};

// Bytes a pool of `layout`'s rank needs so that every id in `blocks` fits.
int64_t PoolBytesForBlocks(const KvLayout& layout, absl::Span<const int32_t> blocks);

// Sets every byte to kPoison.
void PoisonPool(absl::Span<std::byte> pool);

// Poisons `pool`, then writes the pattern of every element source rank `rank` holds for tokens
// [0, num_tokens). REQUIRES: the pool holds every used block id.
void FillSourcePool(const KvLayout& layout, int32_t rank, absl::Span<const int32_t> blocks,
                    int64_t num_tokens, absl::Span<std::byte> pool);

// OK iff every element destination rank `rank` owns for tokens [0, num_tokens) holds its
// pattern, and every block the request does not use is still all kPoison. (Slots past the prompt
// inside used blocks are not checked: the planner may copy whole slabs there.) Otherwise
// DATA_LOSS naming the first wrong element or byte.
[[nodiscard]] absl::Status VerifyDestinationPool(const KvLayout& layout, int32_t rank,
                                                 absl::Span<const int32_t> blocks,
                                                 int64_t num_tokens,
                                                 absl::Span<const std::byte> pool);

}  // namespace tandem::testing
