// LeaseTable (prefill_node/lease_table.h): generations, release and renew by (request id,
// generation), expiry by time, and the earliest-expiry query the reaper sleeps on.
#include "prefill_node/lease_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::UnorderedElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(LeaseTableTest, GenerationsAreUniqueEvenForTheSameRequestId) {
  LeaseTable t;
  const uint64_t a = t.Add("r", {1, 2}, kT0 + absl::Seconds(1));
  const uint64_t b = t.Add("r", {3}, kT0 + absl::Seconds(1));
  EXPECT_NE(a, b);
  EXPECT_EQ(t.size(), 2);
  EXPECT_THAT(t.Release("r", b), Optional(ElementsAre(3)));
  EXPECT_THAT(t.Release("r", a), Optional(ElementsAre(1, 2)));
  EXPECT_EQ(t.size(), 0);
}

TEST(LeaseTableTest, ReleaseNeedsTheMatchingRequestIdAndGenerationAndHappensOnce) {
  LeaseTable t;
  const uint64_t g = t.Add("r", {4, 5}, kT0 + absl::Seconds(1));
  EXPECT_EQ(t.Release("other", g), std::nullopt);  // a generation names one request only
  EXPECT_EQ(t.Release("r", g + 1), std::nullopt);
  EXPECT_EQ(t.size(), 1);
  EXPECT_THAT(t.Release("r", g), Optional(ElementsAre(4, 5)));
  EXPECT_EQ(t.Release("r", g), std::nullopt);  // released twice: the second finds nothing
}

TEST(LeaseTableTest, RenewExtendsButNeverShortens) {
  LeaseTable t;
  const uint64_t g = t.Add("r", {1}, kT0 + absl::Seconds(10));
  EXPECT_THAT(t.Renew("r", g, kT0 + absl::Seconds(20)), Optional(kT0 + absl::Seconds(20)));
  EXPECT_THAT(t.Renew("r", g, kT0 + absl::Seconds(5)), Optional(kT0 + absl::Seconds(20)));
  EXPECT_EQ(t.NextExpiry(), kT0 + absl::Seconds(20));
  EXPECT_EQ(t.Renew("r", g + 1, kT0 + absl::Seconds(30)), std::nullopt);
  EXPECT_EQ(t.Renew("x", g, kT0 + absl::Seconds(30)), std::nullopt);
}

TEST(LeaseTableTest, TakeExpiredRemovesExactlyTheLeasesAtOrBeforeNow) {
  LeaseTable t;
  const uint64_t early = t.Add("a", {1}, kT0 + absl::Seconds(1));
  t.Add("b", {2}, kT0 + absl::Seconds(2));
  const uint64_t late = t.Add("c", {3}, kT0 + absl::Seconds(3));
  EXPECT_THAT(t.TakeExpired(kT0), IsEmpty());
  EXPECT_THAT(t.TakeExpired(kT0 + absl::Seconds(2)),
              UnorderedElementsAre(ElementsAre(1), ElementsAre(2)));
  EXPECT_EQ(t.size(), 1);
  // An expired lease can be neither renewed nor released: its blocks were freed.
  EXPECT_EQ(t.Renew("a", early, kT0 + absl::Seconds(9)), std::nullopt);
  EXPECT_EQ(t.Release("a", early), std::nullopt);
  EXPECT_EQ(t.NextExpiry(), kT0 + absl::Seconds(3));
  EXPECT_THAT(t.Release("c", late), Optional(ElementsAre(3)));
}

TEST(LeaseTableTest, NextExpiryIsTheEarliestOrInfiniteFutureWhenEmpty) {
  LeaseTable t;
  EXPECT_EQ(t.NextExpiry(), absl::InfiniteFuture());
  t.Add("a", {1}, kT0 + absl::Seconds(7));
  const uint64_t g = t.Add("b", {2}, kT0 + absl::Seconds(4));
  EXPECT_EQ(t.NextExpiry(), kT0 + absl::Seconds(4));
  ASSERT_TRUE(t.Release("b", g).has_value());
  EXPECT_EQ(t.NextExpiry(), kT0 + absl::Seconds(7));
}

TEST(LeaseTableTest, RenewedLeaseOutlivesItsFirstExpiry) {
  LeaseTable t;
  const uint64_t g = t.Add("r", {9}, kT0 + absl::Seconds(1));
  ASSERT_TRUE(t.Renew("r", g, kT0 + absl::Seconds(5)).has_value());
  EXPECT_THAT(t.TakeExpired(kT0 + absl::Seconds(2)), IsEmpty());
  EXPECT_THAT(t.Release("r", g), Optional(ElementsAre(9)));
}

TEST(LeaseTableTest, ReleaseRequestTakesEveryLeaseOfTheIdAndNoOther) {
  LeaseTable t;
  t.Add("r", {1, 2}, kT0 + absl::Seconds(1));
  const uint64_t other = t.Add("s", {3}, kT0 + absl::Seconds(1));
  t.Add("r", {4}, kT0 + absl::Seconds(2));
  EXPECT_THAT(t.ReleaseRequest("r"), UnorderedElementsAre(ElementsAre(1, 2), ElementsAre(4)));
  EXPECT_EQ(t.size(), 1);
  EXPECT_THAT(t.ReleaseRequest("r"), IsEmpty());
  EXPECT_THAT(t.ReleaseRequest("unknown"), IsEmpty());
  EXPECT_THAT(t.Release("s", other), Optional(ElementsAre(3)));
}

}  // namespace
}  // namespace tandem
