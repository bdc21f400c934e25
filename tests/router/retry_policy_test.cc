#include "router/retry_policy.h"

#include <gtest/gtest.h>

#include "common/kv_source_failure.h"

namespace tandem {
namespace {

TEST(BackoffDelay, DoublesFromInitialUpToTheCap) {
  const RetryPolicy p;  // 100 ms .. 2 s
  EXPECT_EQ(BackoffDelay(p, 1), absl::Milliseconds(100));
  EXPECT_EQ(BackoffDelay(p, 2), absl::Milliseconds(200));
  EXPECT_EQ(BackoffDelay(p, 3), absl::Milliseconds(400));
  EXPECT_EQ(BackoffDelay(p, 5), absl::Milliseconds(1600));
  EXPECT_EQ(BackoffDelay(p, 6), absl::Seconds(2));
  EXPECT_EQ(BackoffDelay(p, 1000), absl::Seconds(2));  // no overflow
}

TEST(BackoffDelay, CapBelowInitialWins) {
  RetryPolicy p;
  p.initial_backoff = absl::Seconds(5);
  p.max_backoff = absl::Seconds(1);
  EXPECT_EQ(BackoffDelay(p, 1), absl::Seconds(1));
}

TEST(WaitDeadline, EarlierOfClientDeadlineAndBudget) {
  RetryPolicy p;
  p.wait_budget = absl::Seconds(60);
  const absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_EQ(WaitDeadline(p, now, now + absl::Seconds(10)), now + absl::Seconds(10));
  EXPECT_EQ(WaitDeadline(p, now, now + absl::Seconds(600)), now + absl::Seconds(60));
  EXPECT_EQ(WaitDeadline(p, now, absl::InfiniteFuture()), now + absl::Seconds(60));
  // A 25 s outage fits the default budget.
  EXPECT_GT(WaitDeadline(p, now, absl::InfiniteFuture()), now + absl::Seconds(25));
}

TEST(NextAttemptAt, NeverAfterTheDeadline) {
  const RetryPolicy p;
  const absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_EQ(NextAttemptAt(p, 2, now, absl::InfiniteFuture()), now + absl::Milliseconds(200));
  EXPECT_EQ(NextAttemptAt(p, 6, now, now + absl::Milliseconds(50)), now + absl::Milliseconds(50));
}

TEST(HealthPollDelay, FasterWhileSomeNodeIsUnhealthy) {
  EXPECT_EQ(HealthPollDelay(absl::Seconds(1), absl::Milliseconds(200), true), absl::Seconds(1));
  EXPECT_EQ(HealthPollDelay(absl::Seconds(1), absl::Milliseconds(200), false),
            absl::Milliseconds(200));
  // Never slower than the configured interval.
  EXPECT_EQ(HealthPollDelay(absl::Milliseconds(50), absl::Milliseconds(200), false),
            absl::Milliseconds(50));
}

TEST(BlamesPrefillSource, MatchesTheSourceByAddressOrEngineId) {
  const absl::Status unreachable = absl::UnavailableError("failed to connect");
  EXPECT_TRUE(BlamesPrefillSource(BlameKvSource(unreachable, {"10.0.0.1:5000", "", {}}),
                                  "10.0.0.1:5000", "prefill-a"));
  EXPECT_TRUE(BlamesPrefillSource(BlameKvSource(unreachable, {"", "prefill-a", {0}}),
                                  "10.0.0.1:5000", "prefill-a"));
  EXPECT_FALSE(BlamesPrefillSource(absl::UnavailableError("KV capacity short for 5s"),
                                   "10.0.0.1:5000", "prefill-a"));
  // Another prefill node is not this source.
  EXPECT_FALSE(BlamesPrefillSource(BlameKvSource(unreachable, {"10.0.0.2:5000", "prefill-b", {}}),
                                   "10.0.0.1:5000", "prefill-a"));
  EXPECT_FALSE(BlamesPrefillSource(BlameKvSource(unreachable, {"", "", {}}), "", ""));
}

// The decision reads the attached data, never the text: the same failure reworded blames the
// same node, and text that names the source without the data blames nobody.
TEST(BlamesPrefillSource, RewordingTheErrorDoesNotChangeTheDecision) {
  const KvSourceFailure source{"10.0.0.1:5000", "prefill-a", {1}};
  for (const char* message :
       {"cannot get transfer metadata from prefill 10.0.0.1:5000: failed to connect",
        "get from source rank 1 of engine 'prefill-a' epoch 7: failed: Endpoint timeout",
        "the KV source went away", ""}) {
    EXPECT_TRUE(BlamesPrefillSource(BlameKvSource(absl::UnavailableError(message), source),
                                    "10.0.0.1:5000", "prefill-a"))
        << message;
    EXPECT_FALSE(BlamesPrefillSource(absl::UnavailableError(message), "10.0.0.1:5000", "prefill-a"))
        << message;
  }
  // A wrapper that keeps its cause's payloads keeps the blame.
  const absl::Status wrapped =
      WithPayloadsOf(absl::AbortedError("the lease expired during the transfer"),
                     BlameKvSource(absl::UnavailableError("peer reset"), source));
  EXPECT_TRUE(BlamesPrefillSource(wrapped, "", "prefill-a"));
}

TEST(PrefillMayHaveLeased, OnlyWhenTheCallEndedWithoutTheNodesAnswer) {
  // The router holds the KvHandle of an answered call, cancelled or not.
  EXPECT_FALSE(PrefillMayHaveLeased(absl::StatusCode::kOk, false));
  EXPECT_FALSE(PrefillMayHaveLeased(absl::StatusCode::kOk, true));
  // Cancelled by the router, or ended by a cancellation or the deadline: the answer may be lost.
  EXPECT_TRUE(PrefillMayHaveLeased(absl::StatusCode::kCancelled, true));
  EXPECT_TRUE(PrefillMayHaveLeased(absl::StatusCode::kCancelled, false));
  EXPECT_TRUE(PrefillMayHaveLeased(absl::StatusCode::kDeadlineExceeded, false));
  EXPECT_TRUE(PrefillMayHaveLeased(absl::StatusCode::kUnavailable, true));
  // The node's own answer was an error: it took no lease; an unreachable node cannot be told.
  EXPECT_FALSE(PrefillMayHaveLeased(absl::StatusCode::kResourceExhausted, false));
  EXPECT_FALSE(PrefillMayHaveLeased(absl::StatusCode::kInvalidArgument, false));
  EXPECT_FALSE(PrefillMayHaveLeased(absl::StatusCode::kUnavailable, false));
}

}  // namespace
}  // namespace tandem
