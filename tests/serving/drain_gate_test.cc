#include "serving/drain_gate.h"

#include <gtest/gtest.h>

#include <optional>
#include <thread>
#include <vector>

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

TEST(DrainGateTest, AdmitRefusesBeyondTheQueueLimit) {
  DrainGate gate;
  gate.SetQueueLimit(2);
  // One request running in the engine and two waiting fill it: 3 passes, running = 1.
  absl::StatusOr<DrainGate::Pass> a = gate.Admit(0);
  absl::StatusOr<DrainGate::Pass> b = gate.Admit(0);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<DrainGate::Pass> c = gate.Admit(1);  // `a` started running
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<DrainGate::Pass> d = gate.Admit(1);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(d.status().message().find("2 requests waiting, limit 2 (--max_queued_requests)"),
            absl::string_view::npos)
      << d.status();
  EXPECT_EQ(gate.in_flight(), 3);  // the refused call took nothing
  // Once one more runs, there is room again.
  EXPECT_TRUE(gate.Admit(2).ok());
}

TEST(DrainGateTest, AdmitWithoutALimitOnlyRefusesWhileDraining) {
  DrainGate gate;
  std::vector<DrainGate::Pass> passes;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<DrainGate::Pass> p = gate.Admit(0);
    ASSERT_TRUE(p.ok());
    passes.push_back(*std::move(p));
  }
  gate.StartDrain();
  EXPECT_EQ(gate.Admit(0).status().code(), absl::StatusCode::kUnavailable);
  passes.clear();
  EXPECT_EQ(gate.in_flight(), 0);
}

}  // namespace
}  // namespace tandem
