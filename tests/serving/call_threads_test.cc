// serving/call_threads.h: a body runs on its own thread; past the bound TrySpawn refuses and
// drops the body unrun; a finished thread frees its place; the destructor waits for every body.
// Every wait is bounded.
#include "serving/call_threads.h"

#include <atomic>
#include <functional>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr absl::Duration kBound = absl::Seconds(20);

bool WaitFor(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + kBound;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));  // polling an observed condition, bounded
  }
  return true;
}

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
  ASSERT_TRUE(WaitFor([&] { return threads.running() == 0; }));
  EXPECT_EQ(ran.load(), 2);
  absl::Notification third;
  ASSERT_TRUE(threads.TrySpawn([&] { third.Notify(); }));
  EXPECT_TRUE(third.WaitForNotificationWithTimeout(kBound));
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
