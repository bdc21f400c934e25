// common/lru_map.h: lookups refresh an entry, inserts beyond the capacity evict the least
// recently used one, a replaced key keeps one entry, shrinking the capacity evicts at once.
#include "common/lru_map.h"

#include <string>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(LruMapTest, EvictsTheLeastRecentlyUsedEntry) {
  LruMap<int, std::string> m(2);
  m.Insert(1, "one");
  m.Insert(2, "two");
  ASSERT_EQ(m.Find(1), "one");  // 1 is now the most recently used
  m.Insert(3, "three");         // evicts 2
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.evictions(), 1u);
  EXPECT_EQ(m.Find(2), std::nullopt);
  EXPECT_EQ(m.Find(1), "one");
  EXPECT_EQ(m.Find(3), "three");
}

TEST(LruMapTest, ReplacingAKeyKeepsOneEntryAndRefreshesIt) {
  LruMap<int, int> m(2);
  m.Insert(1, 10);
  m.Insert(2, 20);
  m.Insert(1, 11);  // replace: 1 most recent, still two entries
  EXPECT_EQ(m.size(), 2u);
  m.Insert(3, 30);  // evicts 2
  EXPECT_EQ(m.Find(1), 11);
  EXPECT_EQ(m.Find(2), std::nullopt);
  EXPECT_EQ(m.evictions(), 1u);
}

TEST(LruMapTest, CapacityChangesAndZeroCapacity) {
  LruMap<int, int> m(4);
  for (int i = 0; i < 4; ++i) m.Insert(i, i);
  m.set_capacity(1);  // keeps only the most recent (3)
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.Find(3), 3);
  EXPECT_EQ(m.evictions(), 3u);
  m.set_capacity(0);
  m.Insert(7, 7);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.Find(7), std::nullopt);
}

}  // namespace
}  // namespace tandem
