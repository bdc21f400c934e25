// PullWatchdog: every stall / cancel / blame decision, on a fake clock (no transport, no sleeps).
#include "kv_transfer/pull_watchdog.h"

#include <atomic>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem {
namespace {

using tandem::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Action = PullWatchdog::Action;

constexpr absl::Duration kStall = absl::Seconds(10);
constexpr absl::Duration kClose = absl::Seconds(2);

// The `owing` argument of Check: these ranks.
auto Owe(std::vector<int32_t> ranks) {
  return [ranks = std::move(ranks)] { return ranks; };
}

class PullWatchdogTest : public ::testing::Test {
 protected:
  PullWatchdog Make(const CancellationToken* cancel = nullptr) {
    return PullWatchdog("engine 'p0' epoch 3", 32, kStall, kClose, cancel, [this] { return now_; });
  }
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(PullWatchdogTest, WaitsUntilTheStallTimeoutThenBlamesTheOwingRanks) {
  PullWatchdog w = Make();
  now_ += kStall - absl::Milliseconds(1);
  EXPECT_EQ(w.Check(Owe({1}), 3, 0, 5), Action::kWait);
  EXPECT_EQ(w.WaitBudget(absl::Milliseconds(10)), absl::Milliseconds(1));
  now_ += absl::Milliseconds(1);
  EXPECT_EQ(w.WaitBudget(absl::Milliseconds(10)), absl::ZeroDuration());
  EXPECT_EQ(w.Check(Owe({3, 1, 3}), 3, 0, 5), Action::kForceClose);
  EXPECT_TRUE(w.stopping());
  EXPECT_TRUE(w.force_closed());
  std::vector<int32_t> blamed = {7};  // appended to, not replaced
  EXPECT_THAT(w.Finish(5, &blamed),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("KV transfer from engine 'p0' epoch 3 stalled"),
                             HasSubstr("no get completed for 10s; 3 gets outstanding"),
                             HasSubstr("source rank(s) 1,3 after 5 of 32 copies"))));
  EXPECT_THAT(blamed, ElementsAre(7, 1, 3));
}

TEST_F(PullWatchdogTest, ACompletionRestartsTheStallClock) {
  PullWatchdog w = Make();
  now_ += absl::Seconds(9);
  w.OnCompletion();
  now_ += absl::Seconds(9);
  EXPECT_EQ(w.Check(Owe({0}), 1, 0, 1), Action::kWait);
  EXPECT_EQ(w.stall_deadline(), now_ + absl::Seconds(1));
  now_ += absl::Seconds(1);
  EXPECT_EQ(w.Check(Owe({0}), 1, 0, 1), Action::kForceClose);
}

TEST_F(PullWatchdogTest, StallMessageCountsConnectionSetUps) {
  PullWatchdog w = Make();
  now_ += kStall;
  EXPECT_EQ(w.Check(Owe({0, 1}), 0, 2, 0), Action::kForceClose);
  EXPECT_THAT(w.Finish(0, nullptr),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("0 gets and 2 connection set-up(s) outstanding to source "
                                 "rank(s) 0,1")));
}

TEST_F(PullWatchdogTest, AbandonsCloseTimeoutAfterTheForceClose) {
  PullWatchdog w = Make();
  now_ += kStall;
  EXPECT_EQ(w.Check(Owe({0}), 1, 0, 0), Action::kForceClose);
  now_ += kClose - absl::Milliseconds(1);
  EXPECT_EQ(w.Check(Owe({0}), 1, 0, 0), Action::kWait);  // force-close is decided once
  now_ += absl::Milliseconds(1);
  EXPECT_EQ(w.Check(Owe({0}), 1, 0, 0), Action::kAbandon);
}

TEST_F(PullWatchdogTest, CancelForceClosesAtOnceAndBlamesNobody) {
  CancellationToken cancel;
  PullWatchdog w = Make(&cancel);
  EXPECT_FALSE(w.PollCancel());
  EXPECT_FALSE(w.stopping());
  cancel.Cancel();
  EXPECT_TRUE(w.PollCancel());
  EXPECT_TRUE(w.stopping());
  EXPECT_EQ(w.Check(Owe({2}), 4, 0, 6), Action::kForceClose);
  // The gets our force-close cancelled fail, but that is nobody's fault.
  w.OnCopyFailed(2, absl::UnavailableError("get from source rank 2: cancelled"));
  EXPECT_TRUE(w.PollCancel());
  std::vector<int32_t> blamed;
  EXPECT_THAT(w.Finish(6, &blamed),
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("KV transfer from engine 'p0' epoch 3 cancelled after 6 of 32 "
                                 "copies")));
  EXPECT_THAT(blamed, IsEmpty());
}

TEST_F(PullWatchdogTest, CancelAfterAPeerFailureStillReportsCancelledWithoutBlame) {
  CancellationToken cancel;
  PullWatchdog w = Make(&cancel);
  w.OnPeerFailed(1, absl::UnavailableError("source rank 1: connection reset"));
  cancel.Cancel();
  w.PollCancel();
  std::vector<int32_t> blamed;
  EXPECT_THAT(w.Finish(0, &blamed), StatusIs(absl::StatusCode::kCancelled, HasSubstr("after 0")));
  EXPECT_THAT(blamed, IsEmpty());
}

TEST_F(PullWatchdogTest, FirstFailureWinsAndOnlyItsGetIsBlamed) {
  PullWatchdog w = Make();
  w.OnCopyFailed(2, absl::UnavailableError("get from source rank 2 failed"));
  // Later failed gets follow from the first (the pull is stopping): not blamed.
  w.OnCopyFailed(0, absl::UnavailableError("get from source rank 0 failed"));
  std::vector<int32_t> blamed;
  EXPECT_THAT(w.Finish(3, &blamed),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("source rank 2 failed")));
  EXPECT_THAT(blamed, ElementsAre(2));
}

TEST_F(PullWatchdogTest, EveryFailedPeerIsBlamedOnce) {
  PullWatchdog w = Make();
  w.OnPeerFailed(1, absl::UnavailableError("source rank 1: endpoint failed"));
  w.OnPeerFailed(0, absl::UnavailableError("source rank 0: endpoint failed"));
  w.OnPeerFailed(1, absl::UnavailableError("source rank 1: endpoint failed again"));
  std::vector<int32_t> blamed;
  EXPECT_THAT(w.Finish(0, &blamed),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1: endpoint failed")));
  EXPECT_THAT(blamed, ElementsAre(1, 0));
  EXPECT_THAT(w.blamed(), ElementsAre(1, 0));
}

TEST_F(PullWatchdogTest, AFailureWithoutACulpritBlamesNobody) {
  PullWatchdog w = Make();
  w.OnFailure(absl::DataLossError("completed 8 of 16 bytes"));
  EXPECT_TRUE(w.failed());
  std::vector<int32_t> blamed;
  EXPECT_THAT(w.Finish(0, &blamed), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("8 of 16")));
  EXPECT_THAT(blamed, IsEmpty());
}

TEST_F(PullWatchdogTest, AStallAfterAFailureKeepsTheFirstFailureButBlamesTheOwingRanks) {
  PullWatchdog w = Make();
  w.OnFailure(absl::DataLossError("short"));
  now_ += kStall;
  EXPECT_EQ(w.Check(Owe({4}), 1, 0, 0), Action::kForceClose);
  std::vector<int32_t> blamed;
  EXPECT_THAT(w.Finish(0, &blamed), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("short")));
  EXPECT_THAT(blamed, ElementsAre(4));
}

TEST_F(PullWatchdogTest, AsksForTheOwingRanksOnlyWhenItForceCloses) {
  PullWatchdog w = Make();
  int asked = 0;
  auto owing = [&asked] {
    ++asked;
    return std::vector<int32_t>{0};
  };
  EXPECT_EQ(w.Check(owing, 1, 0, 0), Action::kWait);
  EXPECT_EQ(asked, 0);
  now_ += kStall;
  EXPECT_EQ(w.Check(owing, 1, 0, 0), Action::kForceClose);
  EXPECT_EQ(w.Check(owing, 1, 0, 0), Action::kWait);
  EXPECT_EQ(asked, 1);
}

TEST_F(PullWatchdogTest, SucceedsWithNothingToReport) {
  PullWatchdog w = Make();
  w.OnCompletion();
  std::vector<int32_t> blamed;
  EXPECT_TRUE(w.Finish(32, &blamed).ok());
  EXPECT_THAT(blamed, IsEmpty());
  EXPECT_FALSE(w.stopping());
}

}  // namespace
}  // namespace tandem
