// SerialWorkers and JobGroup: per-lane order, lanes in parallel, the bounded queue, shutdown that
// runs every queued job. Waits are on notifications, never sleeps.
#include "kv_transfer/serial_workers.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem {
namespace {

using tandem::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);

TEST(SerialWorkersTest, RunsALanesJobsInOrderOnOneThread) {
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  JobGroup group;
  {
    SerialWorkers w("test lane", 2, 16);
    for (int i = 0; i < 10; ++i) {
      group.Add();
      ASSERT_TRUE(w.Submit(
                       1,
                       [&, i] {
                         order.push_back(i);  // one lane: never concurrent
                         threads.push_back(std::this_thread::get_id());
                         group.Done();
                       },
                       absl::Now() + kWait)
                      .ok());
    }
    ASSERT_TRUE(group.WaitFor(kWait));
  }
  EXPECT_THAT(order, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
  for (const std::thread::id& t : threads) EXPECT_EQ(t, threads.front());
  EXPECT_NE(threads.front(), std::this_thread::get_id());
}

TEST(SerialWorkersTest, LanesRunConcurrently) {
  SerialWorkers w("test lane", 2, 4);
  absl::Notification in_lane0, release0;
  ASSERT_TRUE(w.Submit(
                   0,
                   [&] {
                     in_lane0.Notify();
                     release0.WaitForNotificationWithTimeout(kWait);
                   },
                   absl::Now() + kWait)
                  .ok());
  ASSERT_TRUE(in_lane0.WaitForNotificationWithTimeout(kWait));
  // Lane 0 is busy; lane 1 still runs its job.
  absl::Notification ran1;
  ASSERT_TRUE(w.Submit(
                   1, [&] { ran1.Notify(); }, absl::Now() + kWait)
                  .ok());
  EXPECT_TRUE(ran1.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(w.pending(0), 1);
  release0.Notify();
}

TEST(SerialWorkersTest, AFullQueueRefusesAfterTheDeadline) {
  SerialWorkers w("test lane", 1, 2);
  absl::Notification started, release;
  ASSERT_TRUE(w.Submit(
                   0,
                   [&] {
                     started.Notify();
                     release.WaitForNotificationWithTimeout(kWait);
                   },
                   absl::Now() + kWait)
                  .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));
  std::atomic<int> ran{0};
  ASSERT_TRUE(w.Submit(
                   0, [&] { ++ran; }, absl::Now())
                  .ok());
  ASSERT_TRUE(w.Submit(
                   0, [&] { ++ran; }, absl::Now())
                  .ok());
  EXPECT_THAT(w.Submit(
                  0, [&] { ++ran; }, absl::Now() + absl::Milliseconds(5)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("test lane 0: 2 jobs already queued")));
  EXPECT_EQ(w.pending(0), 3);
  release.Notify();
  // Room again once the lane drains: a waiting Submit gets in.
  ASSERT_TRUE(w.Submit(
                   0, [&] { ++ran; }, absl::Now() + kWait)
                  .ok());
  JobGroup group;
  group.Add();
  ASSERT_TRUE(w.Submit(
                   0, [&] { group.Done(); }, absl::Now() + kWait)
                  .ok());
  ASSERT_TRUE(group.WaitFor(kWait));
  EXPECT_EQ(ran.load(), 3);
}

TEST(SerialWorkersTest, ShutdownRunsEveryQueuedJobAndJoins) {
  std::atomic<int> ran{0};
  absl::Notification started, release;
  auto w = std::make_unique<SerialWorkers>("test lane", 1, 8);
  ASSERT_TRUE(w->Submit(
                   0,
                   [&] {
                     started.Notify();
                     release.WaitForNotificationWithTimeout(kWait);
                     ++ran;
                   },
                   absl::Now() + kWait)
                  .ok());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(w->Submit(
                     0, [&] { ++ran; }, absl::Now())
                    .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));
  release.Notify();
  w.reset();
  EXPECT_EQ(ran.load(), 6);
}

TEST(SerialWorkersTest, RefusesALaneOutOfRange) {
  SerialWorkers w("test lane", 2, 1);
  EXPECT_THAT(w.Submit(
                  2, [] {}, absl::Now()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lane 2 out of range")));
  EXPECT_THAT(w.Submit(
                  -1, [] {}, absl::Now()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lane -1")));
}

TEST(JobGroupTest, WaitForTimesOutWhileJobsArePending) {
  JobGroup g;
  EXPECT_TRUE(g.WaitFor(absl::ZeroDuration()));
  g.Add();
  EXPECT_FALSE(g.WaitFor(absl::Milliseconds(1)));
  g.Done();
  EXPECT_TRUE(g.WaitFor(absl::ZeroDuration()));
}

}  // namespace
}  // namespace tandem
