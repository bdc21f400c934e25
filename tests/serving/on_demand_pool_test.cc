// OnDemandPool: threads start only when every started one is busy, never more than the maximum;
// tasks beyond it wait and run; Shutdown runs what is queued and joins. Waits are bounded.
#include "serving/on_demand_pool.h"

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);

// Tasks that block until released, counting how many are running.
struct Gate {
  absl::Mutex mu;
  int running ABSL_GUARDED_BY(mu) = 0;
  int done ABSL_GUARDED_BY(mu) = 0;
  bool open ABSL_GUARDED_BY(mu) = false;

  std::function<void()> Task() {
    return [this] {
      absl::MutexLock lock(&mu);
      ++running;
      mu.Await(absl::Condition(&open));
      --running;
      ++done;
    };
  }
  bool AwaitRunning(int n) {
    absl::MutexLock lock(&mu);
    const auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return running == n; };
    return mu.AwaitWithTimeout(absl::Condition(&reached), kWait);
  }
  bool AwaitDone(int n) {
    absl::MutexLock lock(&mu);
    const auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return done == n; };
    return mu.AwaitWithTimeout(absl::Condition(&reached), kWait);
  }
  void Open() {
    absl::MutexLock lock(&mu);
    open = true;
  }
};

// Polls (bounded) until every started thread waits for a task.
bool AwaitAllIdle(const OnDemandPool& pool) {
  const absl::Time deadline = absl::Now() + kWait;
  while (pool.idle_threads() != pool.threads_started()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Microseconds(200));  // polling an observed condition
  }
  return true;
}

TEST(OnDemandPoolTest, TasksOneAtATimeUseOneThread) {
  OnDemandPool pool(64);
  for (int i = 0; i < 200; ++i) {
    absl::Notification ran;
    pool.Enqueue([&ran] { ran.Notify(); });
    ASSERT_TRUE(ran.WaitForNotificationWithTimeout(kWait)) << i;
    ASSERT_TRUE(AwaitAllIdle(pool));
  }
  EXPECT_EQ(pool.threads_started(), 1u);
}

TEST(OnDemandPoolTest, ConcurrentTasksGetAThreadEachUpToTheMaximum) {
  OnDemandPool pool(4);
  Gate gate;
  for (int i = 0; i < 3; ++i) pool.Enqueue(gate.Task());
  ASSERT_TRUE(gate.AwaitRunning(3));  // three at once: three threads
  EXPECT_EQ(pool.threads_started(), 3u);
  for (int i = 0; i < 7; ++i) pool.Enqueue(gate.Task());
  ASSERT_TRUE(gate.AwaitRunning(4));  // the maximum; the other six wait
  EXPECT_EQ(pool.threads_started(), 4u);
  EXPECT_EQ(pool.queued(), 6u);
  gate.Open();
  EXPECT_TRUE(gate.AwaitDone(10));
  EXPECT_EQ(pool.threads_started(), 4u);
  EXPECT_EQ(pool.queued(), 0u);
}

TEST(OnDemandPoolTest, IdleThreadsAreReusedBeforeNewOnesStart) {
  OnDemandPool pool(16);
  {
    Gate gate;
    for (int i = 0; i < 5; ++i) pool.Enqueue(gate.Task());
    ASSERT_TRUE(gate.AwaitRunning(5));
    gate.Open();
    ASSERT_TRUE(gate.AwaitDone(5));
  }
  // Five idle threads: rounds of five concurrent tasks start no more.
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(AwaitAllIdle(pool));
    Gate gate;
    for (int i = 0; i < 5; ++i) pool.Enqueue(gate.Task());
    ASSERT_TRUE(gate.AwaitRunning(5)) << round;
    gate.Open();
    ASSERT_TRUE(gate.AwaitDone(5)) << round;
  }
  EXPECT_EQ(pool.threads_started(), 5u);
}

TEST(OnDemandPoolTest, ShutdownRunsQueuedTasksAndDropsLaterOnes) {
  std::atomic<int> ran{0};
  OnDemandPool pool(1);
  Gate gate;
  pool.Enqueue(gate.Task());
  ASSERT_TRUE(gate.AwaitRunning(1));
  for (int i = 0; i < 5; ++i) pool.Enqueue([&ran] { ran.fetch_add(1); });
  EXPECT_EQ(pool.queued(), 5u);
  gate.Open();
  pool.Shutdown();  // joins: the five queued tasks ran first
  EXPECT_EQ(ran.load(), 5);
  pool.Enqueue([&ran] { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 5);
  EXPECT_EQ(pool.queued(), 0u);
}

}  // namespace
}  // namespace tandem
