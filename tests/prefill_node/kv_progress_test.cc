// KvProgress (pipelined transfer): monotonic, final once done or failed, and Await wakes on a
// change or a cancel and otherwise returns after its timeout.
#include "prefill_node/kv_progress.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(KvProgressTest, GrowsOnlyAndStopsOnceFinal) {
  KvProgress p;
  p.Advance(10);
  p.Advance(5);  // never shrinks
  EXPECT_EQ(p.Get().tokens_ready, 10);
  EXPECT_FALSE(p.Get().final());
  p.Finish(40, 7);
  p.Advance(50);
  p.Fail(absl::CancelledError("late"));
  const KvProgressSnapshot s = p.Get();
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.tokens_ready, 40);
  EXPECT_EQ(s.first_token, 7);
  EXPECT_TRUE(s.status.ok());
}

TEST(KvProgressTest, FinishKeepsTheFirstTokensLogprobs) {
  KvProgress p;
  EXPECT_FALSE(p.Get().first_logprobs.has_value());
  const TokenLogprobs l{-0.5f, {{7, -0.5f}}};
  p.Finish(40, 7, {}, l);
  ASSERT_TRUE(p.Get().first_logprobs.has_value());
  EXPECT_EQ(*p.Get().first_logprobs, l);
}

TEST(KvProgressTest, FailureIsFinal) {
  KvProgress p;
  p.Advance(3);
  p.Fail(absl::AbortedError("lease expired"));
  p.Finish(40, 7);
  const KvProgressSnapshot s = p.Get();
  EXPECT_FALSE(s.done);
  EXPECT_EQ(s.tokens_ready, 3);
  EXPECT_EQ(s.status.code(), absl::StatusCode::kAborted);
}

TEST(KvProgressTest, AwaitWakesOnAChangeAndOtherwiseTimesOut) {
  KvProgress p;
  const KvProgressSnapshot start = p.Get();
  absl::Time t0 = absl::Now();
  EXPECT_EQ(p.Await(start, absl::Milliseconds(50)), start);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(45));
  std::thread t([&p] { p.Advance(16); });
  t0 = absl::Now();
  // Bounded: returns at the change, or after 20 s at the latest (then the checks below fail).
  const KvProgressSnapshot now = p.Await(start, absl::Seconds(20));
  t.join();
  EXPECT_EQ(now.tokens_ready, 16);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
}

TEST(KvProgressTest, AwaitEndsAtOnceWhenCancelled) {
  KvProgress p;
  const KvProgressSnapshot start = p.Get();
  CancellationToken cancel;
  absl::Notification waiting;
  absl::Duration waited;
  std::thread watcher([&] {
    waiting.Notify();
    const absl::Time t0 = absl::Now();
    EXPECT_EQ(p.Await(start, absl::Seconds(20), &cancel), start);  // unchanged
    waited = absl::Now() - t0;
  });
  ASSERT_TRUE(waiting.WaitForNotificationWithTimeout(absl::Seconds(20)));
  cancel.Cancel();
  watcher.join();
  EXPECT_LT(waited, absl::Seconds(10));  // woken by the cancel, not the timeout
  // Already cancelled: returns without waiting.
  const absl::Time t1 = absl::Now();
  EXPECT_EQ(p.Await(start, absl::Seconds(20), &cancel), start);
  EXPECT_LT(absl::Now() - t1, absl::Seconds(10));
}

}  // namespace
}  // namespace tandem
