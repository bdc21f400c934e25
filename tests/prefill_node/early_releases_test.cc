// EarlyReleases (prefill_node/early_releases.h): a remembered request id answers one later lease,
// within its ttl; the set never holds more than its capacity (oldest forgotten first), and an id
// remembered again lives from its latest Remember.
#include "prefill_node/early_releases.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
constexpr absl::Duration kTtl = absl::Seconds(10);

TEST(EarlyReleasesTest, ARememberedIdIsTakenOnce) {
  EarlyReleases e(4, kTtl);
  EXPECT_FALSE(e.Take("r", kT0));  // never released
  e.Remember("r", kT0);
  EXPECT_EQ(e.size(), 1u);
  EXPECT_FALSE(e.Take("other", kT0 + absl::Seconds(1)));
  EXPECT_TRUE(e.Take("r", kT0 + absl::Seconds(1)));
  EXPECT_FALSE(e.Take("r", kT0 + absl::Seconds(2)));  // one release answers one lease
  EXPECT_EQ(e.size(), 0u);
}

TEST(EarlyReleasesTest, ForgetsAnIdWhenItsTtlPasses) {
  EarlyReleases e(4, kTtl);
  e.Remember("r", kT0);
  EXPECT_FALSE(e.Take("r", kT0 + kTtl));  // expiry is exclusive
  e.Remember("s", kT0);
  e.Remember("t", kT0 + absl::Seconds(5));
  EXPECT_TRUE(e.Take("t", kT0 + kTtl + absl::Seconds(1)));  // still within its own ttl
  EXPECT_EQ(e.size(), 0u);                                  // "s" expired and was swept
}

TEST(EarlyReleasesTest, HoldsAtMostItsCapacityForgettingTheOldestFirst) {
  EarlyReleases e(3, kTtl);
  for (int i = 0; i < 5; ++i) e.Remember(absl::StrCat("r", i), kT0 + absl::Milliseconds(i));
  EXPECT_EQ(e.size(), 3u);
  EXPECT_FALSE(e.Take("r0", kT0 + absl::Seconds(1)));
  EXPECT_FALSE(e.Take("r1", kT0 + absl::Seconds(1)));
  EXPECT_TRUE(e.Take("r2", kT0 + absl::Seconds(1)));
  EXPECT_TRUE(e.Take("r3", kT0 + absl::Seconds(1)));
  EXPECT_TRUE(e.Take("r4", kT0 + absl::Seconds(1)));
}

TEST(EarlyReleasesTest, AnIdRememberedAgainLivesFromItsLatestRemember) {
  EarlyReleases e(8, kTtl);
  e.Remember("r", kT0);
  e.Remember("r", kT0 + absl::Seconds(8));
  EXPECT_EQ(e.size(), 1u);
  // The first entry's expiry passes; the id stays (its second Remember speaks for it).
  EXPECT_TRUE(e.Take("r", kT0 + absl::Seconds(12)));
}

TEST(EarlyReleasesTest, AStaleEntryNeverForgetsANewerRememberOfTheSameId) {
  EarlyReleases e(2, kTtl);
  e.Remember("r", kT0);
  EXPECT_TRUE(e.Take("r", kT0));  // its entry stays queued until expiry or eviction
  e.Remember("r", kT0 + absl::Seconds(1));
  e.Remember("s", kT0 + absl::Seconds(2));  // full: the stale first "r" entry is evicted
  EXPECT_TRUE(e.Take("r", kT0 + absl::Seconds(3)));
  EXPECT_TRUE(e.Take("s", kT0 + absl::Seconds(3)));
}

}  // namespace
}  // namespace tandem
