// common/parallel_for.h: every index exactly once for any n, grain and thread count; shares run
// on more than one thread; nested loops run inline; workers that parked between loops (idle
// longer than their spin) still pick the next loop up; each thread's setting is its own; the
// OpenMP loop team covers the same ranges on the OpenMP team, per thread.
#include "common/parallel_for.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

// Runs one loop and checks that [0, n) was covered exactly once, by non-empty ranges.
void ExpectCoveredOnce(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(n, 0)));
  ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    EXPECT_LT(b, e);
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
}

TEST(ParallelForTest, CoversEveryIndexOnceForAnyShapeAndThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    SetThreadsForThisThread(threads);
    EXPECT_EQ(ThreadsForThisThread(), threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
      for (int64_t grain : {1, 3, 100}) ExpectCoveredOnce(n, grain);
    }
  }
  SetThreadsForThisThread(0);
  EXPECT_EQ(ThreadsForThisThread(), 1);  // clamped
}

TEST(ParallelForTest, SharesRunOnSeveralThreadsAndNestedLoopsInline) {
  SetThreadsForThisThread(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int64_t> inner{0};
  ParallelFor(2, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    const std::thread::id me = std::this_thread::get_id();
    ParallelFor(100, 1, [&](int64_t b, int64_t e) {
      EXPECT_EQ(std::this_thread::get_id(), me);  // inline
      inner.fetch_add(e - b);
    });
  });
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(inner.load(), 200);
}

TEST(ParallelForTest, ManyBackToBackLoopsAndLoopsAfterWorkersParked) {
  SetThreadsForThisThread(2);
  int64_t sum = 0;
  std::vector<int64_t> part(2);
  for (int round = 0; round < 2000; ++round) {
    ParallelFor(2, 1, [&](int64_t b, int64_t) { part[b] = b + 1; });
    sum += part[0] + part[1];
  }
  EXPECT_EQ(sum, 2000 * 3);
  for (int round = 0; round < 3; ++round) {
    // Longer than the workers' spin-and-yield window (~0.35 ms), so they park; not a
    // synchronisation — the loop below must complete and be correct either way.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ExpectCoveredOnce(1000, 1);
  }
}

// Regression: a thread's first loop creates its workers and publishes the loop at once; a worker
// thread that first runs after that must still take the loop (it once took the new generation
// as already seen and the caller waited forever). Fresh threads, each running its first loop
// immediately, many times; the whole run is bounded.
TEST(ParallelForTest, FirstLoopOfAFreshThreadCompletesEvenWhenItsWorkerStartsLate) {
  std::atomic<int> done{0};
  std::thread runner([&] {
    for (int i = 0; i < 300; ++i) {
      std::thread t([] {
        SetThreadsForThisThread(2);
        ExpectCoveredOnce(64, 1);
      });
      t.join();
      done.fetch_add(1);
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done.load() < 300 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a counter, bounded
  }
  if (done.load() < 300) {
    ADD_FAILURE() << "a fresh thread's first loop hung (" << done.load() << " of 300 done)";
    std::_Exit(1);  // the hung thread cannot be joined
  }
  runner.join();
}

TEST(ParallelForTest, EachThreadHasItsOwnSettingAndWorkers) {
  SetThreadsForThisThread(2);
  std::thread other([] {
    SetThreadsForThisThread(1);
    std::set<std::thread::id> ids;
    ParallelFor(100, 1, [&](int64_t, int64_t) { ids.insert(std::this_thread::get_id()); });
    EXPECT_EQ(ids.size(), 1u);
    SetThreadsForThisThread(3);
    ExpectCoveredOnce(999, 1);
  });
  ExpectCoveredOnce(999, 1);
  other.join();
  EXPECT_EQ(ThreadsForThisThread(), 2);
}

TEST(ParallelForTest, OpenMpTeamCoversEveryIndexOnceOnTheTeamAndNestsInline) {
  SetThreadsForThisThread(2);
  EXPECT_EQ(LoopTeamForThisThread(), LoopTeam::kWorkers);
  SetLoopTeamForThisThread(LoopTeam::kOpenMp);
  for (int threads : {1, 2, 3}) {
    SetThreadsForThisThread(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      for (int64_t grain : {1, 3, 100}) ExpectCoveredOnce(n, grain);
    }
  }
  SetThreadsForThisThread(2);
  std::mutex mu;
  std::set<int> team_ids;
  std::atomic<int64_t> inner{0};
  ParallelFor(2, 1, [&](int64_t, int64_t) {
    EXPECT_TRUE(omp_in_parallel());  // on the OpenMP team, not the workers
    {
      std::lock_guard<std::mutex> lock(mu);
      team_ids.insert(omp_get_thread_num());
    }
    const std::thread::id me = std::this_thread::get_id();
    ParallelFor(100, 1, [&](int64_t b, int64_t e) {
      EXPECT_EQ(std::this_thread::get_id(), me);  // inline
      inner.fetch_add(e - b);
    });
  });
  EXPECT_EQ(team_ids, (std::set<int>{0, 1}));
  EXPECT_EQ(inner.load(), 200);

  // The setting is this thread's: another thread still uses the workers.
  std::thread other([] {
    EXPECT_EQ(LoopTeamForThisThread(), LoopTeam::kWorkers);
    SetThreadsForThisThread(2);
    ParallelFor(2, 1, [](int64_t, int64_t) { EXPECT_FALSE(omp_in_parallel()); });
  });
  other.join();
  SetLoopTeamForThisThread(LoopTeam::kWorkers);
  ParallelFor(2, 1, [](int64_t, int64_t) { EXPECT_FALSE(omp_in_parallel()); });
}

TEST(ParallelForTest, OmpParallelForRunsOnTheTeamWhateverTheSetting) {
  SetThreadsForThisThread(2);
  SetLoopTeamForThisThread(LoopTeam::kWorkers);
  std::atomic<int> on_team{0};
  std::vector<std::atomic<int>> hits(500);
  OmpParallelFor(500, 1, [&](int64_t b, int64_t e) {
    if (omp_in_parallel()) on_team.fetch_add(1);
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  EXPECT_EQ(on_team.load(), 2);
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
}

}  // namespace
}  // namespace tandem
