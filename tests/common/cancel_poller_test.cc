// common/cancel_poller.h: a probe that turns true cancels its token within a bound; a token
// already cancelled or a probe removed is not touched again; several calls are watched at once.
#include "common/cancel_poller.h"

#include <atomic>
#include <optional>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

constexpr absl::Duration kBound = absl::Seconds(10);

TEST(CancelPollerTest, AProbeThatTurnsTrueCancelsItsToken) {
  CancelPoller poller(absl::Milliseconds(1));
  std::atomic<bool> gone{false};
  std::atomic<int> asked{0};
  CancellationToken token;
  CancelPoller::Registration r = poller.Add(
      [&] {
        asked.fetch_add(1);
        return gone.load();
      },
      &token);
  EXPECT_FALSE(token.WaitFor(absl::Milliseconds(20)));  // asked, and said no
  EXPECT_GT(asked.load(), 0);
  gone = true;
  EXPECT_TRUE(token.WaitFor(kBound));
  EXPECT_EQ(poller.registered(), 0);  // a cancelled call is no longer asked
}

TEST(CancelPollerTest, ARemovedProbeIsNotAskedAgain) {
  CancelPoller poller(absl::Milliseconds(1));
  std::atomic<int> removed_asked{0};
  CancellationToken removed_token;
  std::optional<CancelPoller::Registration> removed;
  removed.emplace(poller.Add(
      [&] {
        removed_asked.fetch_add(1);
        return false;
      },
      &removed_token));
  removed.reset();
  const int before = removed_asked.load();
  // Two rounds of another probe: the poller went round at least once after the removal.
  std::atomic<int> rounds{0};
  CancellationToken other;
  CancelPoller::Registration r = poller.Add([&] { return rounds.fetch_add(1) + 1 >= 2; }, &other);
  ASSERT_TRUE(other.WaitFor(kBound));
  EXPECT_EQ(removed_asked.load(), before);
  EXPECT_FALSE(removed_token.cancelled());
}

TEST(CancelPollerTest, WatchesManyCallsAndCancelsOnlyThoseThatWentAway) {
  CancelPoller poller(absl::Milliseconds(1));
  constexpr int kCalls = 16;
  std::atomic<bool> gone[kCalls] = {};
  CancellationToken tokens[kCalls];
  std::vector<CancelPoller::Registration> regs;
  for (int i = 0; i < kCalls; ++i) {
    regs.push_back(poller.Add([&gone, i] { return gone[i].load(); }, &tokens[i]));
  }
  for (int i = 0; i < kCalls; i += 2) gone[i] = true;
  for (int i = 0; i < kCalls; i += 2) EXPECT_TRUE(tokens[i].WaitFor(kBound)) << i;
  EXPECT_EQ(poller.registered(), kCalls / 2);
  for (int i = 1; i < kCalls; i += 2) EXPECT_FALSE(tokens[i].cancelled()) << i;
}

}  // namespace
}  // namespace tandem
