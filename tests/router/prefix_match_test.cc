#include "router/prefix_match.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "common/prefix_hash.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

std::vector<int32_t> Iota(int n, int32_t from = 10) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

// A digest holding the hashes of `cached`'s full blocks (as a prefill node would publish them).
PrefixDigest DigestOf(uint64_t salt, int64_t block_tokens, const std::vector<int32_t>& cached) {
  PrefixDigest d;
  d.salt = salt;
  d.block_tokens = block_tokens;
  for (const uint64_t h : PrefixHashChain(salt, cached, block_tokens)) d.blocks.insert(h);
  return d;
}

TEST(PromptPrefixHashesTest, ChainMatchesPrefixHashChainAndIsComputedOncePerKey) {
  const std::vector<int32_t> prompt = Iota(100);
  PromptPrefixHashes hashes(prompt);
  EXPECT_EQ(hashes.prompt_tokens(), 100);
  const std::vector<uint64_t> want = PrefixHashChain(7, prompt, 16);
  const absl::Span<const uint64_t> first = hashes.Chain(7, 16);
  EXPECT_EQ(std::vector<uint64_t>(first.begin(), first.end()), want);
  EXPECT_EQ(first.size(), 6u);  // 100 / 16 full blocks
  // Asked again (another node with the same salt and block size): the same chain, not rehashed.
  EXPECT_EQ(hashes.Chain(7, 16).data(), first.data());
  EXPECT_EQ(hashes.chains_computed(), 1);
  // A node with another salt or block size gets its own chain.
  EXPECT_EQ(hashes.Chain(8, 16).size(), 6u);
  EXPECT_EQ(hashes.Chain(7, 32).size(), 3u);
  EXPECT_EQ(hashes.chains_computed(), 3);
  EXPECT_TRUE(hashes.Chain(7, 0).empty());
}

TEST(CachedPrefixTokensTest, CountsLeadingBlocksHeld) {
  const std::vector<int32_t> system = Iota(64);  // four 16-token blocks
  std::vector<int32_t> prompt = system;
  const std::vector<int32_t> question = Iota(40, 5000);
  prompt.insert(prompt.end(), question.begin(), question.end());
  PromptPrefixHashes hashes(prompt);

  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 16, system), hashes), 64);
  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 16, prompt), hashes), 96);  // 104 tokens: 6 blocks
  // Half the system prompt (a node that cached a shorter prompt sharing it).
  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 16, Iota(40)), hashes), 32);
  // The digest's salt is what the prompt is hashed with: blocks a node keyed with another salt
  // (another model or KV layout) never match.
  PrefixDigest other_salt = DigestOf(3, 16, system);
  other_salt.salt = 4;
  EXPECT_EQ(CachedPrefixTokens(other_salt, hashes), 0);
  EXPECT_EQ(CachedPrefixTokens(DigestOf(4, 16, system), hashes), 64);
  // Its block size: the prompt is hashed in 32-token blocks for it.
  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 32, system), hashes), 64);
  // Empty digest, bad block size.
  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 16, {}), hashes), 0);
  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 0, system), hashes), 0);
}

TEST(CachedPrefixTokensTest, StopsAtTheFirstMissingBlock) {
  const std::vector<int32_t> prompt = Iota(64);
  PromptPrefixHashes hashes(prompt);
  const std::vector<uint64_t> chain = PrefixHashChain(3, prompt, 16);
  PrefixDigest d = DigestOf(3, 16, {});
  // Blocks 0, 2 and 3 held but not 1 (evicted): only block 0 is a usable prefix.
  d.blocks = {chain[0], chain[2], chain[3]};
  EXPECT_EQ(CachedPrefixTokens(d, hashes), 16);
  // A later block alone is no prefix (its hash covers the tokens before it too).
  d.blocks = {chain[3]};
  EXPECT_EQ(CachedPrefixTokens(d, hashes), 0);
}

TEST(CachedPrefixTokensTest, TheBlockHoldingTheLastTokenIsNotCounted) {
  // A prompt sent again exactly: its last token is computed anyway, so its last block is.
  const std::vector<int32_t> prompt = Iota(64);
  PromptPrefixHashes hashes(prompt);
  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 16, prompt), hashes), 48);
  const std::vector<int32_t> longer = Iota(65);
  PromptPrefixHashes longer_hashes(longer);
  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 16, prompt), longer_hashes), 64);
}

TEST(CachedPrefixTokensTest, AShorterPromptThanABlockHasNothingCached) {
  const std::vector<int32_t> prompt = Iota(15);
  PromptPrefixHashes hashes(prompt);
  EXPECT_EQ(CachedPrefixTokens(DigestOf(3, 16, Iota(64)), hashes), 0);
}

}  // namespace
}  // namespace tandem
