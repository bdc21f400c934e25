#include "router/prefix_match.h"

#include <algorithm>

#include "common/prefix_hash.h"

namespace tandem {

absl::Span<const uint64_t> PromptPrefixHashes::Chain(uint64_t salt, int64_t block_tokens) {
  if (block_tokens <= 0) return {};
  const auto key = std::make_pair(salt, block_tokens);
  auto it = chains_.find(key);
  if (it == chains_.end()) {
    it = chains_.emplace(key, PrefixHashChain(salt, prompt_, block_tokens)).first;
  }
  return it->second;
}

void RecentBlocks::Add(absl::Span<const uint64_t> chain, absl::Time at) {
  for (const uint64_t hash : chain) blocks_[hash] = at;
}

void RecentBlocks::ForgetBefore(absl::Time t) {
  absl::erase_if(blocks_, [t](const auto& entry) { return entry.second < t; });
}

int64_t CachedPrefixTokens(const PrefixDigest& digest, PromptPrefixHashes& prompt,
                           const RecentBlocks* recent) {
  if (digest.block_tokens <= 0) return 0;
  if (digest.blocks.empty() && (recent == nullptr || recent->size() == 0)) return 0;
  absl::Span<const uint64_t> chain = prompt.Chain(digest.salt, digest.block_tokens);
  // The last prompt token is always computed (its logits give the first token): a block holding
  // it is never reused.
  const int64_t usable = std::max<int64_t>(prompt.prompt_tokens() - 1, 0) / digest.block_tokens;
  chain = chain.first(std::min(chain.size(), static_cast<size_t>(usable)));
  int64_t held = 0;
  for (const uint64_t hash : chain) {
    if (!digest.blocks.contains(hash) && (recent == nullptr || !recent->contains(hash))) break;
    ++held;
  }
  return held * digest.block_tokens;
}

}  // namespace tandem
