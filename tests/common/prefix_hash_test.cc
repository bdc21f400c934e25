#include "common/prefix_hash.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(PrefixHashTest, OneHashPerFullBlockEachCoveringItsWholePrefix) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const uint64_t salt = PrefixSalt("model=m layout=b4");
  const std::vector<uint64_t> chain = PrefixHashChain(salt, tokens, 4);
  ASSERT_EQ(chain.size(), 2u);  // the trailing 2 tokens are a partial block
  EXPECT_EQ(chain[0], PrefixBlockHash(salt, absl::MakeConstSpan(tokens).subspan(0, 4)));
  EXPECT_EQ(chain[1], PrefixBlockHash(chain[0], absl::MakeConstSpan(tokens).subspan(4, 4)));
}

TEST(PrefixHashTest, SharedPrefixesShareHashesAndDivergeAfter) {
  const uint64_t salt = PrefixSalt("x");
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 9};
  const std::vector<uint64_t> ca = PrefixHashChain(salt, a, 4);
  const std::vector<uint64_t> cb = PrefixHashChain(salt, b, 4);
  EXPECT_EQ(ca[0], cb[0]);
  EXPECT_NE(ca[1], cb[1]);
  // The same second block after a different first block hashes differently.
  const std::vector<int32_t> c = {0, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_NE(PrefixHashChain(salt, c, 4)[1], ca[1]);
}

TEST(PrefixHashTest, SaltSeparatesLayoutsAndValuesAreStable) {
  const std::vector<int32_t> t = {7, 7, 7, 7};
  EXPECT_NE(PrefixHashChain(PrefixSalt("b4"), t, 4), PrefixHashChain(PrefixSalt("b8"), t, 4));
  // Fixed across processes and builds: FNV-1a over little-endian bytes. A change here changes
  // what every deployed instance advertises, so it must be deliberate.
  EXPECT_EQ(PrefixBlockHash(0, {}), 0xa8c7f832281a39c5ull);
  EXPECT_TRUE(PrefixHashChain(1, t, 0).empty());
  EXPECT_TRUE(PrefixHashChain(1, t, 5).empty());
}

}  // namespace
}  // namespace tandem
