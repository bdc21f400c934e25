// PrefixCache (engine/prefix_cache.h) over a real BlockManager: chain lookup with token
// verification, reference counts, LRU eviction under allocation pressure and under its own cap,
// never evicting a block someone else holds, the digest's MRU order, and recorded block checks
// that refuse a block corrupted while cached.
#include "engine/prefix_cache.h"

#include <algorithm>
#include <numeric>

#include "common/prefix_hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kV = 4;  // tokens per cached block in these tests

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// What the prefill engine does for one prompt: acquire the cached prefix (at most all but the last
// token's block), allocate the rest, "compute", insert. Returns the table (caller holds it).
std::vector<int32_t> Prefill(PrefixCache& cache, const std::vector<int32_t>& prompt,
                             int64_t* hit_blocks = nullptr) {
  const std::vector<uint64_t> chain = cache.Chain(prompt);
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> table = cache.Acquire(prompt, chain, (n - 1) / kV);
  if (hit_blocks != nullptr) *hit_blocks = static_cast<int64_t>(table.size());
  const int64_t need = (n + kV - 1) / kV - static_cast<int64_t>(table.size());
  absl::StatusOr<std::vector<int32_t>> rest = cache.Allocate(static_cast<int32_t>(need));
  EXPECT_TRUE(rest.ok()) << rest.status();
  if (!rest.ok()) return table;
  table.insert(table.end(), rest->begin(), rest->end());
  cache.Insert(prompt, chain, table);
  return table;
}

TEST(PrefixCacheTest, ChainIsTheSharedPrefixHash) {
  BlockManager bm(8);
  PrefixCache cache(&bm, {.salt = 42, .block_tokens = kV});
  const std::vector<int32_t> p = Tokens(10, 3);
  EXPECT_EQ(cache.Chain(p), PrefixHashChain(42, p, kV));
  EXPECT_EQ(cache.Chain(p).size(), 2u);  // the partial third block has no hash
}

TEST(PrefixCacheTest, ReusesTheLongestVerifiedPrefixAndHoldsReferences) {
  BlockManager bm(16);
  PrefixCache cache(&bm, {.salt = 1, .block_tokens = kV});
  const std::vector<int32_t> a = Tokens(10, 100);  // blocks [100..103] [104..107] + 2 tokens
  int64_t hits = -1;
  const std::vector<int32_t> ta = Prefill(cache, a, &hits);
  EXPECT_EQ(hits, 0);
  EXPECT_THAT(ta, ElementsAre(0, 1, 2));
  EXPECT_EQ(cache.stats().blocks, 2);  // full blocks only
  EXPECT_EQ(bm.RefCount(0), 2);        // request + cache
  EXPECT_EQ(bm.RefCount(2), 1);        // the partial block is not cached

  // Same first block, different second: one block reused.
  std::vector<int32_t> b = a;
  b[5] = 7;
  const std::vector<int32_t> tb = Prefill(cache, b, &hits);
  EXPECT_EQ(hits, 1);
  EXPECT_EQ(tb[0], 0);
  EXPECT_NE(tb[1], 1);
  EXPECT_EQ(bm.RefCount(0), 3);  // two requests + cache

  // The whole of `a` plus more: both blocks reused, and the new third block cached.
  std::vector<int32_t> c = a;
  c.insert(c.end(), {9, 9, 9});
  const std::vector<int32_t> tc = Prefill(cache, c, &hits);
  EXPECT_EQ(hits, 2);
  EXPECT_THAT(std::vector<int32_t>(tc.begin(), tc.begin() + 2), ElementsAre(0, 1));

  // A prompt that is exactly the cached blocks still computes its last block.
  const std::vector<int32_t> d(a.begin(), a.begin() + 8);
  const std::vector<int32_t> td = Prefill(cache, d, &hits);
  EXPECT_EQ(hits, 1);
  EXPECT_EQ(td[0], 0);
  EXPECT_NE(td[1], 1);
  // a's two, b's second, c's third; d's copy of a's second is not kept.
  EXPECT_EQ(cache.stats().blocks, 4);

  for (const auto* t : {&ta, &tb, &tc, &td}) ASSERT_TRUE(bm.Free(*t).ok());
  EXPECT_EQ(cache.evictable_blocks(), 4);
  EXPECT_EQ(cache.free_blocks(), 16);
  EXPECT_EQ(bm.free_blocks(), 12);
}

TEST(PrefixCacheTest, SaltSeparatesLayouts) {
  BlockManager bm(16);
  PrefixCache one(&bm, {.salt = 1, .block_tokens = kV});
  PrefixCache two(&bm, {.salt = 2, .block_tokens = kV});
  const std::vector<int32_t> p = Tokens(9, 5);
  const std::vector<int32_t> t = Prefill(one, p);
  EXPECT_THAT(two.Acquire(p, two.Chain(p), 2), IsEmpty());
  EXPECT_THAT(one.Acquire(p, one.Chain(p), 2), ElementsAre(t[0], t[1]));
}

TEST(PrefixCacheTest, AHashCollisionIsNotAHit) {
  BlockManager bm(16);
  PrefixCache cache(&bm, {.salt = 1, .block_tokens = kV});
  const std::vector<int32_t> a = Tokens(8, 10);
  const std::vector<int32_t> ta = Prefill(cache, a);
  // A different prompt presented with a's hashes, as if FNV had collided: the stored tokens differ.
  const std::vector<int32_t> b = Tokens(8, 50);
  EXPECT_THAT(cache.Acquire(b, cache.Chain(a), 2), IsEmpty());
  // Same tokens for block 1 but a different block 0 under a's first hash: the parent differs.
  std::vector<int32_t> c = a;
  c[0] = 99;
  std::vector<uint64_t> forged = cache.Chain(c);
  forged[1] = cache.Chain(a)[1];
  const std::vector<int32_t> tc = Prefill(cache, c);
  EXPECT_THAT(cache.Acquire(c, forged, 2), ElementsAre(tc[0]));  // block 0 is c's own; 1 is not
  ASSERT_TRUE(bm.Free({tc[0]}).ok());
  // Inserting under a colliding hash keeps the existing entry and stops there.
  const int64_t before = cache.stats().blocks;
  cache.Insert(b, cache.Chain(a), ta);
  EXPECT_EQ(cache.stats().blocks, before);
}

TEST(PrefixCacheTest, EvictsLeastRecentlyUsedOnlyWhenAllocationWouldFail) {
  BlockManager bm(6);
  PrefixCache cache(&bm, {.salt = 1, .block_tokens = kV});
  const std::vector<int32_t> a = Tokens(8, 10), b = Tokens(8, 30), c = Tokens(8, 50);
  ASSERT_TRUE(bm.Free(Prefill(cache, a)).ok());  // blocks 0, 1
  ASSERT_TRUE(bm.Free(Prefill(cache, b)).ok());  // blocks 2, 3
  ASSERT_TRUE(bm.Free(Prefill(cache, c)).ok());  // blocks 4, 5: the pool is now all cache
  EXPECT_EQ(bm.free_blocks(), 0);
  EXPECT_EQ(cache.free_blocks(), 6);
  // Touch a: b is now the least recently used prompt.
  ASSERT_TRUE(bm.Free(cache.Acquire(a, cache.Chain(a), 2)).ok());
  absl::StatusOr<std::vector<int32_t>> got = cache.Allocate(2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre(2, 3));
  EXPECT_EQ(cache.stats().evictions, 2);
  EXPECT_THAT(cache.Acquire(b, cache.Chain(b), 2), IsEmpty());
  std::vector<int32_t> ha = cache.Acquire(a, cache.Chain(a), 2);
  EXPECT_THAT(ha, ElementsAre(0, 1));
  ASSERT_TRUE(bm.Free(ha).ok());
  ASSERT_TRUE(bm.Free(*got).ok());
}

TEST(PrefixCacheTest, TrimsChainsFromTheTail) {
  BlockManager bm(3);
  PrefixCache cache(&bm, {.salt = 1, .block_tokens = kV});
  const std::vector<int32_t> a = Tokens(12, 10);  // three full blocks, all cached
  const std::vector<int32_t> ta = Prefill(cache, a);
  ASSERT_TRUE(bm.Free(ta).ok());
  absl::StatusOr<std::vector<int32_t>> one = cache.Allocate(1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<int32_t>{ta[2]});  // the deepest block goes first
  EXPECT_THAT(cache.Acquire(a, cache.Chain(a), 3), ElementsAre(ta[0], ta[1]));
}

TEST(PrefixCacheTest, NeverEvictsABlockSomeoneHolds) {
  BlockManager bm(4);
  PrefixCache cache(&bm, {.salt = 1, .block_tokens = kV});
  const std::vector<int32_t> a = Tokens(8, 10);
  const std::vector<int32_t> leased = Prefill(cache, a);  // held, as a lease holds it
  const std::vector<int32_t> b = Tokens(8, 40);
  ASSERT_TRUE(bm.Free(Prefill(cache, b)).ok());  // only the cache holds b's blocks
  EXPECT_EQ(cache.evictable_blocks(), 2);
  EXPECT_EQ(cache.free_blocks(), 2);
  // Three blocks cannot be had without evicting a's: nothing is evicted, nothing allocated.
  absl::StatusOr<std::vector<int32_t>> three = cache.Allocate(3);
  EXPECT_EQ(three.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.stats().evictions, 0);
  EXPECT_EQ(cache.stats().blocks, 4);
  // Two can: b's.
  absl::StatusOr<std::vector<int32_t>> two = cache.Allocate(2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(cache.stats().evictions, 2);
  EXPECT_THAT(cache.Acquire(a, cache.Chain(a), 2), ElementsAre(leased[0], leased[1]));
  EXPECT_EQ(bm.RefCount(leased[0]), 3);
}

TEST(PrefixCacheTest, MaxBlocksCapsTheCache) {
  BlockManager bm(16);
  PrefixCache cache(&bm, {.salt = 1, .block_tokens = kV, .max_blocks = 3});
  ASSERT_TRUE(bm.Free(Prefill(cache, Tokens(8, 10))).ok());
  ASSERT_TRUE(bm.Free(Prefill(cache, Tokens(8, 30))).ok());
  EXPECT_EQ(cache.stats().blocks, 3);
  EXPECT_EQ(cache.stats().evictions, 1);
  // Three held blocks replace the three unheld ones.
  const std::vector<int32_t> held = Prefill(cache, Tokens(12, 50));
  EXPECT_EQ(cache.stats().blocks, 3);
  EXPECT_EQ(cache.stats().evictions, 4);
  // Nothing evictable: the next insert stops at the cap instead.
  const std::vector<int32_t> more = Prefill(cache, Tokens(8, 70));
  EXPECT_EQ(cache.stats().blocks, 3);
  EXPECT_EQ(cache.stats().evictions, 4);
  EXPECT_THAT(cache.Acquire(Tokens(8, 70), cache.Chain(Tokens(8, 70)), 2), IsEmpty());
  ASSERT_TRUE(bm.Free(held).ok());
  ASSERT_TRUE(bm.Free(more).ok());
}

TEST(PrefixCacheTest, DigestListsMostRecentlyUsedFirstAndTruncates) {
  BlockManager bm(16);
  PrefixCache cache(&bm, {.salt = 9, .block_tokens = kV});
  const std::vector<int32_t> a = Tokens(8, 10), b = Tokens(4, 30);
  ASSERT_TRUE(bm.Free(Prefill(cache, a)).ok());
  ASSERT_TRUE(bm.Free(Prefill(cache, Tokens(5, 30))).ok());
  const std::vector<uint64_t> ca = cache.Chain(a), cb = cache.Chain(b);
  PrefixCacheDigestView d = cache.Digest(10);
  EXPECT_EQ(d.salt, 9u);
  EXPECT_EQ(d.block_tokens, kV);
  EXPECT_THAT(d.block_hashes, ElementsAre(cb[0], ca[0], ca[1]));
  EXPECT_FALSE(d.truncated);
  d = cache.Digest(2);
  EXPECT_THAT(d.block_hashes, ElementsAre(cb[0], ca[0]));
  EXPECT_TRUE(d.truncated);
}

TEST(PrefixCacheTest, CountsLookupsAndReleasesEverythingOnDestruction) {
  BlockManager bm(8);
  {
    PrefixCache cache(&bm, {.salt = 1, .block_tokens = kV});
    cache.RecordLookup(10, 4);
    cache.RecordLookup(6, 0);
    EXPECT_EQ(cache.stats().query_tokens, 16);
    EXPECT_EQ(cache.stats().hit_tokens, 4);
    ASSERT_TRUE(bm.Free(Prefill(cache, Tokens(9, 10))).ok());
    EXPECT_EQ(bm.free_blocks(), 6);
  }
  EXPECT_EQ(bm.free_blocks(), 8);
  EXPECT_EQ(bm.free_errors(), 0);
}

// Issue 28: a matched block is re-verified against the checks recorded when it was written; a
// corrupted one (the fake `verify` says so) is dropped with the rest of its chain, the prompt
// reuses only the blocks before it, and the next prefill caches the chain afresh.
TEST(PrefixCacheTest, ABlockCorruptedWhileCachedIsDroppedOnItsNextHit) {
  BlockManager bm(16);
  std::vector<int32_t> corrupted;
  std::vector<int32_t> verified;
  PrefixCacheOptions o{.salt = 5, .block_tokens = kV};
  o.verify = [&](int32_t block, absl::Span<const uint32_t> checks) {
    verified.push_back(block);
    EXPECT_THAT(checks, ElementsAre(static_cast<uint32_t>(block) * 10, 7u));
    return std::find(corrupted.begin(), corrupted.end(), block) == corrupted.end();
  };
  PrefixCache cache(&bm, o);
  const std::vector<int32_t> p = Tokens(14, 30);  // 3 full blocks + 2 tokens
  std::vector<int32_t> t = Prefill(cache, p);
  ASSERT_THAT(t, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(cache.Checks(t), ElementsAre(IsEmpty(), IsEmpty(), IsEmpty(), IsEmpty()));
  // The node records the first write's checks; the partial block is not cached (ignored), and a
  // second record does not replace the first.
  std::vector<std::vector<uint32_t>> checks;
  for (int32_t b : t) checks.push_back({static_cast<uint32_t>(b) * 10, 7u});
  cache.RecordChecks(t, checks);
  cache.RecordChecks(t, std::vector<std::vector<uint32_t>>(4, {1u, 1u}));
  EXPECT_THAT(cache.Checks(t)[1], ElementsAre(10u, 7u));
  EXPECT_THAT(cache.Checks(t)[3], IsEmpty());
  bm.Release(t);

  int64_t hits = -1;
  t = Prefill(cache, p, &hits);
  EXPECT_EQ(hits, 3);
  EXPECT_THAT(verified, ElementsAre(0, 1, 2));
  bm.Release(t);

  // Block 1 corrupted: block 0 is reused, 1 and 2 are dropped (freed: only the cache held them).
  corrupted = {1};
  verified.clear();
  t = Prefill(cache, p, &hits);
  EXPECT_EQ(hits, 1);
  EXPECT_THAT(verified, ElementsAre(0, 1));
  EXPECT_EQ(cache.stats().corrupt_blocks, 1);
  EXPECT_EQ(t[0], 0);
  EXPECT_EQ(cache.stats().blocks, 3);          // 0 and the recomputed 1 and 2, cached afresh
  EXPECT_THAT(cache.Checks(t)[1], IsEmpty());  // their checks come from the new write
  bm.Release(t);
  EXPECT_EQ(bm.free_blocks(), 16 - 3);  // nothing leaked: the dropped blocks were freed
}

// The re-read of a hit runs outside the cache's lock (other admissions go on meanwhile) and
// while the caller already holds its references, so a block being verified cannot be evicted.
TEST(PrefixCacheTest, HitsAreVerifiedOutsideTheLockWithTheirReferencesHeld) {
  BlockManager bm(16);
  PrefixCache* self = nullptr;
  std::vector<int32_t> evictable_during_verify;
  PrefixCacheOptions o{.salt = 5, .block_tokens = kV};
  o.verify = [&](int32_t, absl::Span<const uint32_t>) {
    // Takes the cache's lock: would deadlock if Acquire still held it here.
    evictable_during_verify.push_back(self->evictable_blocks());
    return true;
  };
  PrefixCache cache(&bm, o);
  self = &cache;
  const std::vector<int32_t> p = Tokens(14, 40);  // 3 full blocks + 2 tokens
  std::vector<int32_t> t = Prefill(cache, p);
  cache.RecordChecks(t, std::vector<std::vector<uint32_t>>(t.size(), {1u}));
  bm.Release(t);
  EXPECT_EQ(cache.evictable_blocks(), 3);
  int64_t hits = -1;
  t = Prefill(cache, p, &hits);
  EXPECT_EQ(hits, 3);
  EXPECT_THAT(evictable_during_verify, ElementsAre(0, 0, 0));
  bm.Release(t);
  EXPECT_EQ(cache.evictable_blocks(), 3);
}

}  // namespace
}  // namespace tandem
