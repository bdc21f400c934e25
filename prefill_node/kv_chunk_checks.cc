#include "prefill_node/kv_chunk_checks.h"

#include <algorithm>
#include <utility>

#include "attention/dcp_layout.h"
#include "common/status_macros.h"

namespace tandem {

KvChunkChecks::KvChunkChecks(KvLayout layout, int64_t num_tokens)
    : layout_(std::move(layout)),
      num_tokens_(num_tokens),
      block_tokens_(VirtualBlockTokens(layout_.parallel.dcp_geometry())) {}

absl::Status KvChunkChecks::Written(absl::Span<const absl::Span<const std::byte>> pools,
                                    absl::Span<const int32_t> blocks, int64_t begin, int64_t end) {
  if (first_written_ < 0) {
    first_written_ = begin;
    // A block the prompt started writing in the middle of holds tokens written before (never
    // the case for a cached prefix, which is whole blocks): it is left to the end's pass.
    next_block_ = (begin + block_tokens_ - 1) / block_tokens_;
  }
  end = std::min(end, num_tokens_);
  const int64_t full = std::min<int64_t>(end / block_tokens_, static_cast<int64_t>(blocks.size()));
  if (static_cast<int64_t>(checks_.size()) < full) checks_.resize(static_cast<size_t>(full));
  for (; next_block_ < full; ++next_block_) {
    TANDEM_ASSIGN_OR_RETURN(checks_[static_cast<size_t>(next_block_)],
                            ComputeKvBlockChecks(layout_, pools, blocks[next_block_]));
    ++blocks_checked_;
  }
  return absl::OkStatus();
}

std::vector<KvBlockChecks> MergeKnownChecks(std::vector<KvBlockChecks> a,
                                            const std::vector<KvBlockChecks>& b) {
  if (a.size() < b.size()) a.resize(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    if (a[i].empty()) a[i] = b[i];
  }
  return a;
}

}  // namespace tandem
