// serving/call_threads.h: a body runs on its own thread; past the bound TrySpawn refuses and
// drops the body unrun; a finished thread frees its place; AwaitIdle is woken by the last body's
// end and gives up at its deadline; JoinAll and the destructor wait for every body. Every wait is
// bounded.
#include "serving/call_threads.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr absl::Duration kBound = absl::Seconds(20);

TEST(CallThreadsTest, RefusesPastTheBoundAndFreesAPlaceWhenABodyEnds) {
  CallThreads threads(2);
  absl::Notification release;
  std::atomic<int> ran{0};
  auto blocking = [&] {
    release.WaitForNotificationWithTimeout(kBound);
    ran.fetch_add(1);
  };
  ASSERT_TRUE(threads.TrySpawn(blocking));
  ASSERT_TRUE(threads.TrySpawn(blocking));
  EXPECT_EQ(threads.running(), 2);
  auto dropped = std::make_shared<int>(0);
  const std::weak_ptr<int> watch = dropped;
  EXPECT_FALSE(threads.TrySpawn([dropped = std::move(dropped), &ran] { ran.fetch_add(100); }));
  EXPECT_TRUE(watch.expired());  // the refused body was destroyed, unrun
  release.Notify();
  ASSERT_TRUE(threads.AwaitIdle(absl::Now() + kBound));
  EXPECT_EQ(threads.running(), 0);
  EXPECT_EQ(ran.load(), 2);
  absl::Notification third;
  ASSERT_TRUE(threads.TrySpawn([&] { third.Notify(); }));
  EXPECT_TRUE(third.WaitForNotificationWithTimeout(kBound));
}

TEST(CallThreadsTest, AwaitIdleGivesUpAtItsDeadlineAndIsWokenByTheLastEnd) {
  CallThreads threads(4);
  EXPECT_TRUE(threads.AwaitIdle(absl::Now()));  // none runs
  absl::Notification release;
  ASSERT_TRUE(threads.TrySpawn([&] { release.WaitForNotificationWithTimeout(kBound); }));
  EXPECT_FALSE(threads.AwaitIdle(absl::Now() + absl::Milliseconds(50)));
  std::thread releaser([&] { release.Notify(); });
  const absl::Time began = absl::Now();
  // An hour-long deadline: only the body's end can return it in time.
  EXPECT_TRUE(threads.AwaitIdle(absl::Now() + absl::Hours(1)));
  EXPECT_LT(absl::Now() - began, kBound);
  releaser.join();
  threads.JoinAll();
  EXPECT_EQ(threads.running(), 0);
}

TEST(CallThreadsTest, DestructorWaitsForEveryBody) {
  std::atomic<int> done{0};
  {
    CallThreads threads(8);
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE(threads.TrySpawn([&done] {
        absl::SleepFor(absl::Milliseconds(20));  // work that takes a while, not a wait
        done.fetch_add(1);
      }));
    }
  }
  EXPECT_EQ(done.load(), 8);
}

}  // namespace
}  // namespace tandem
