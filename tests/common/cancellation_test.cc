// common/cancellation.h: Cancel wakes waiters at once (not a poll), WaitFor times out when
// nothing cancels, callbacks run once in order (at once when already cancelled, never once
// unregistered), a handle destroyed while its callback runs elsewhere waits for it, a callback
// may drop its own handle, children follow their parent (not the other way), and concurrent
// registrations and cancels lose nothing.
#include "common/cancellation.h"

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

// Generous: only a broken token waits this long; a working one returns in microseconds.
constexpr absl::Duration kBound = absl::Seconds(10);

TEST(CancellationTokenTest, StartsUncancelledAndCancelIsIdempotent) {
  CancellationToken token;
  EXPECT_FALSE(token.cancelled());
  token.Cancel();
  EXPECT_TRUE(token.cancelled());
  token.Cancel();
  EXPECT_TRUE(token.cancelled());
  EXPECT_TRUE(token.WaitFor(absl::ZeroDuration()));
}

TEST(CancellationTokenTest, WaitForTimesOutWhenNothingCancels) {
  CancellationToken token;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(token.WaitFor(absl::Milliseconds(30)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
  EXPECT_FALSE(token.WaitUntil(absl::Now() - absl::Seconds(1)));  // a past deadline
}

TEST(CancellationTokenTest, CancelWakesABlockedWaiterAtOnce) {
  CancellationToken token;
  absl::Notification waiting;
  std::atomic<bool> woke{false};
  absl::Duration waited;
  std::thread waiter([&] {
    waiting.Notify();
    const absl::Time start = absl::Now();
    woke = token.WaitFor(kBound);
    waited = absl::Now() - start;
  });
  ASSERT_TRUE(waiting.WaitForNotificationWithTimeout(kBound));
  token.Cancel();
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_LT(waited, kBound / 2);  // woken by Cancel, not by the timeout
}

TEST(CancellationTokenTest, CallbacksRunOnceInRegistrationOrder) {
  CancellationToken token;
  std::vector<int> order;
  CancelCallback a = token.OnCancel([&] { order.push_back(1); });
  CancelCallback b = token.OnCancel([&] { order.push_back(2); });
  EXPECT_TRUE(order.empty());
  token.Cancel();
  token.Cancel();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(CancellationTokenTest, RegisteringAfterCancelRunsAtOnce) {
  CancellationToken token;
  token.Cancel();
  int runs = 0;
  CancelCallback handle = token.OnCancel([&] { ++runs; });
  EXPECT_EQ(runs, 1);
  handle.Reset();  // empty: nothing to unregister
  EXPECT_EQ(runs, 1);
}

TEST(CancellationTokenTest, AnUnregisteredCallbackNeverRuns) {
  CancellationToken token;
  int runs = 0;
  {
    CancelCallback handle = token.OnCancel([&] { ++runs; });
  }
  CancelCallback reset = token.OnCancel([&] { ++runs; });
  reset.Reset();
  token.Cancel();
  EXPECT_EQ(runs, 0);
}

TEST(CancellationTokenTest, AMovedHandleKeepsTheRegistration) {
  CancellationToken token;
  int runs = 0;
  CancelCallback moved;
  {
    CancelCallback handle = token.OnCancel([&] { ++runs; });
    moved = std::move(handle);
  }  // the moved-from handle unregisters nothing
  token.Cancel();
  EXPECT_EQ(runs, 1);
}

TEST(CancellationTokenTest, ACallbackMayDropItsOwnHandleAndCancelAgain) {
  CancellationToken token;
  std::optional<CancelCallback> handle;
  int runs = 0;
  handle = token.OnCancel([&] {
    ++runs;
    token.Cancel();  // re-entrant: already cancelled, returns
    handle.reset();  // its own registration, on the cancelling thread: no wait
  });
  token.Cancel();
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(handle.has_value());
}

TEST(CancellationTokenTest, ResetWaitsForItsCallbackRunningOnAnotherThread) {
  CancellationToken token;
  absl::Notification entered;
  absl::Notification never;
  std::atomic<bool> finished{false};
  CancelCallback handle = token.OnCancel([&] {
    entered.Notify();
    // Long enough that a Reset that did not wait would see finished == false.
    never.WaitForNotificationWithTimeout(absl::Milliseconds(200));
    finished = true;
  });
  std::thread canceller([&] { token.Cancel(); });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(kBound));
  handle.Reset();
  EXPECT_TRUE(finished);
  canceller.join();
}

TEST(CancellationTokenTest, AChildFollowsItsParentNotTheOtherWay) {
  CancellationToken parent;
  CancellationToken child(&parent);
  CancellationToken grandchild(&child);
  CancellationToken sibling(&parent);
  child.Cancel();
  EXPECT_TRUE(child.cancelled());
  EXPECT_TRUE(grandchild.cancelled());
  EXPECT_FALSE(parent.cancelled());
  EXPECT_FALSE(sibling.cancelled());
  parent.Cancel();
  EXPECT_TRUE(sibling.cancelled());
}

TEST(CancellationTokenTest, AChildOfACancelledParentStartsCancelled) {
  CancellationToken parent;
  parent.Cancel();
  CancellationToken child(&parent);
  EXPECT_TRUE(child.cancelled());
}

TEST(CancellationTokenTest, ADestroyedChildIsNoLongerReachedFromItsParent) {
  CancellationToken parent;
  int runs = 0;
  {
    CancellationToken child(&parent);
    CancelCallback handle = child.OnCancel([&] { ++runs; });
    handle.Reset();
  }  // a parent still linked to it would touch freed memory below (ASan) or run the callback
  parent.Cancel();
  EXPECT_EQ(runs, 0);
}

TEST(CancellationTokenTest, ParentCancelWakesAWaiterOnTheChild) {
  CancellationToken parent;
  CancellationToken child(&parent);
  absl::Notification waiting;
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    waiting.Notify();
    woke = child.WaitFor(kBound);
  });
  ASSERT_TRUE(waiting.WaitForNotificationWithTimeout(kBound));
  const absl::Time start = absl::Now();
  parent.Cancel();
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_LT(absl::Now() - start, kBound / 2);
}

// Registrations, unregistrations, children and waits race one Cancel: every callback still
// registered when Cancel ran runs exactly once, and every waiter wakes within the bound.
TEST(CancellationTokenTest, ConcurrentRegistrationsAndCancelLoseNothing) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200;
  CancellationToken token;
  std::atomic<int> kept_runs{0};
  std::atomic<int> dropped_runs{0};
  std::atomic<int> children_cancelled{0};
  std::atomic<int> waiters_woken{0};
  absl::Notification go;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      ASSERT_TRUE(go.WaitForNotificationWithTimeout(kBound));
      std::vector<CancelCallback> kept;
      for (int i = 0; i < kPerThread; ++i) {
        kept.push_back(token.OnCancel([&] { kept_runs.fetch_add(1); }));
        // Registered and dropped at once: it may run (Cancel came between) but only once.
        CancelCallback dropped = token.OnCancel([&] { dropped_runs.fetch_add(1); });
      }
      CancellationToken child(&token);
      if (child.WaitFor(kBound)) children_cancelled.fetch_add(1);
      if (token.WaitFor(kBound)) waiters_woken.fetch_add(1);
    });
  }
  go.Notify();
  token.Cancel();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(kept_runs.load(), kThreads * kPerThread);
  EXPECT_LE(dropped_runs.load(), kThreads * kPerThread);
  EXPECT_EQ(children_cancelled.load(), kThreads);
  EXPECT_EQ(waiters_woken.load(), kThreads);
}

}  // namespace
}  // namespace tandem
