// LeaseKeeper (decode_node/lease_keeper.h): the renewal schedule, and the keeper against a fake
// prefill — renewals keep a short lease alive, a refused renewal marks it lost and cancels the
// pull's token.
#include "decode_node/lease_keeper.h"

#include <functional>

#include "gtest/gtest.h"
#include "kv_transfer/fake/fake_kv_source.h"
#include "tests/decode_node/fake_prefill.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
constexpr absl::Duration kBound = absl::Seconds(20);

TEST(NextLeaseRenewalTest, HalfwayThroughALongLease) {
  EXPECT_EQ(NextLeaseRenewal(kT0, kT0 + absl::Seconds(30), absl::Seconds(10)),
            kT0 + absl::Seconds(15));
}

TEST(NextLeaseRenewalTest, AtLeastOneRpcTimeoutBeforeExpiry) {
  EXPECT_EQ(NextLeaseRenewal(kT0, kT0 + absl::Seconds(12), absl::Seconds(10)),
            kT0 + absl::Seconds(2));
}

TEST(NextLeaseRenewalTest, NeverSoonerThanTheMinimumInterval) {
  EXPECT_EQ(NextLeaseRenewal(kT0, kT0 + absl::Seconds(5), absl::Seconds(10)),
            kT0 + kMinRenewInterval);
  EXPECT_EQ(NextLeaseRenewal(kT0, kT0 - absl::Seconds(1), absl::Seconds(1)),
            kT0 + kMinRenewInterval);
}

bool WaitFor(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

class LeaseKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvSourceOptions o;
    o.engine_id = "p";
    o.layout = KvLayout{ParallelConfig{1, 1, 1, 16, 16}, ModelDims{1, 2, 2, 8}, KvDType::kF32};
    o.pool_bytes_per_rank = 4096;
    absl::StatusOr<std::unique_ptr<fake::FakeKvSource>> source =
        fake::FakeKvSource::Create(&net_, o);
    ASSERT_OK(source);
    source_ = std::move(*source);
    prefill_.AddInstance("p:1", source_.get());
  }
  fake::FakeKvNetwork net_;
  std::unique_ptr<fake::FakeKvSource> source_;
  FakePrefill prefill_{absl::Seconds(1)};
};

TEST_F(LeaseKeeperTest, KeepsAShortLeaseAliveFarPastItsExpiry) {
  const KvHandle kv = prefill_.Lease("p:1", "r", 16);
  CancellationToken lost;
  LeaseKeeper keeper(&prefill_, kv, absl::Milliseconds(50), &lost);
  ASSERT_TRUE(WaitFor([&] { return prefill_.renewals() >= 5; }));  // ≥ 5 × 500 ms
  EXPECT_GT(absl::Now(), kv.lease_expiry);
  EXPECT_EQ(prefill_.leases(), 1);
  keeper.Stop();
  EXPECT_FALSE(keeper.lost());
  EXPECT_FALSE(lost.cancelled());
}

TEST_F(LeaseKeeperTest, RefusedRenewalMarksTheLeaseLostAndCancelsThePull) {
  const KvHandle kv = prefill_.Lease("p:1", "r", 16);
  prefill_.ExpireAll();
  CancellationToken lost;
  LeaseKeeper keeper(&prefill_, kv, absl::Milliseconds(50), &lost);
  ASSERT_TRUE(lost.WaitFor(kBound));  // the pull's token, cancelled at once
  EXPECT_TRUE(keeper.lost());
}

TEST_F(LeaseKeeperTest, FailingRenewalCallsAreRetriedNotFatal) {
  const KvHandle kv = prefill_.Lease("p:1", "r", 16);
  prefill_.set_renew_fails(true);
  CancellationToken lost;
  LeaseKeeper keeper(&prefill_, kv, absl::Milliseconds(50), &lost);
  ASSERT_TRUE(WaitFor([&] { return prefill_.renew_calls() >= 2; }));  // both refused
  prefill_.set_renew_fails(false);
  ASSERT_TRUE(WaitFor([&] { return prefill_.renewals() >= 1; }));
  EXPECT_FALSE(keeper.lost());
  EXPECT_FALSE(lost.cancelled());
}

}  // namespace
}  // namespace tandem::testing
