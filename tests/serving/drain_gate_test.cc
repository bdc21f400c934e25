#include "serving/drain_gate.h"

#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "absl/time/clock.h"

namespace tandem {
namespace {

TEST(DrainGateTest, PassesUntilDrainThenRefuses) {
  DrainGate gate;
  EXPECT_FALSE(gate.draining());
  std::optional<DrainGate::Pass> a = gate.Enter();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(gate.in_flight(), 1);
  gate.StartDrain();
  EXPECT_TRUE(gate.draining());
  EXPECT_FALSE(gate.Enter().has_value());
  EXPECT_EQ(gate.in_flight(), 1);  // the refused call took nothing
  a.reset();
  EXPECT_EQ(gate.in_flight(), 0);
}

TEST(DrainGateTest, WaitIdleTimesOutWhileAPassIsOut) {
  DrainGate gate;
  std::optional<DrainGate::Pass> a = gate.Enter();
  gate.StartDrain();
  const absl::Time start = absl::Now();
  EXPECT_FALSE(gate.WaitIdle(start + absl::Milliseconds(50)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
}

TEST(DrainGateTest, WaitIdleReturnsWhenTheLastPassIsReturned) {
  DrainGate gate;
  EXPECT_TRUE(gate.WaitIdle(absl::Now()));  // nothing in flight
  std::optional<DrainGate::Pass> a = gate.Enter();
  std::optional<DrainGate::Pass> b = gate.Enter();
  gate.StartDrain();
  std::thread worker([&] {
    a.reset();
    b.reset();
  });
  EXPECT_TRUE(gate.WaitIdle(absl::Now() + absl::Seconds(30)));
  worker.join();
  EXPECT_EQ(gate.in_flight(), 0);
}

TEST(DrainGateTest, AMovedPassIsReturnedOnce) {
  DrainGate gate;
  std::optional<DrainGate::Pass> a = gate.Enter();
  {
    DrainGate::Pass moved = std::move(*a);
    a.reset();
    EXPECT_EQ(gate.in_flight(), 1);
  }
  EXPECT_EQ(gate.in_flight(), 0);
}

}  // namespace
}  // namespace tandem
