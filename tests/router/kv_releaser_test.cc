// KvReleaser (router/kv_releaser.h) against a fake prefill node over real gRPC: a release by
// request id arrives as ReleaseKv{request_id, epoch 0, generation 0} without blocking the caller;
// many at once from several threads all arrive; a node that cannot be reached costs a log line
// within the releaser's timeout, never a hang; destroying it lets a call in flight land. Every wait
// is bounded.
#include "router/kv_releaser.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "router/unary_call.h"
#include "tests/router/fake_nodes.h"

namespace tandem::testing_router {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);

// A plain channel: the router's node channels ping every 2 s, which the fake's server (unlike a
// node's) answers with GOAWAY too_many_pings when the test runs slowly (ThreadSanitizer).
std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

class Lines {
 public:
  LogFn fn() {
    return [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      lines_.push_back(line);
    };
  }
  std::vector<std::string> get() const {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

TEST(KvReleaserTest, ReleasesByRequestIdWithGenerationZero) {
  FakePrefill prefill("p0", std::make_shared<PrefillScript>());
  Lines log;
  KvReleaser releaser(absl::Seconds(5), log.fn());
  releaser.ReleaseRequest(Channel(prefill.address()), prefill.address(), "req-7/1", "req-7");
  ASSERT_TRUE(prefill.WaitForReleases(1, kWait));
  ASSERT_TRUE(releaser.WaitIdle(absl::Now() + kWait));
  const std::vector<v1::ReleaseKvRequest> releases = prefill.releases();
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].request_id(), "req-7/1");  // the id the node's Prefill call carried
  EXPECT_EQ(releases[0].epoch(), 0u);
  EXPECT_EQ(releases[0].generation(), 0u);
  EXPECT_EQ(releaser.in_flight(), 0);
  EXPECT_TRUE(log.get().empty());  // a successful release is not logged
}

TEST(KvReleaserTest, ManyReleasesFromSeveralThreadsAllArrive) {
  FakePrefill prefill("p0", std::make_shared<PrefillScript>());
  Lines log;
  KvReleaser releaser(absl::Seconds(5), log.fn());
  std::shared_ptr<grpc::Channel> channel = Channel(prefill.address());
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        releaser.ReleaseRequest(channel, prefill.address(), absl::StrCat("r", t, "-", i),
                                absl::StrCat("r", t, "-", i));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(releaser.WaitIdle(absl::Now() + kWait));
  EXPECT_EQ(prefill.releases().size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_TRUE(log.get().empty());
}

TEST(KvReleaserTest, AnUnreachableNodeCostsALogLineNotAHang) {
  Lines log;
  const absl::Time start = absl::Now();
  {
    KvReleaser releaser(absl::Seconds(2), log.fn());
    // Nothing listens on port 1: the call fails (UNAVAILABLE) or reaches its 2-s deadline.
    releaser.ReleaseRequest(Channel("127.0.0.1:1"), "127.0.0.1:1", "gone-1", "gone-1");
    ASSERT_TRUE(releaser.WaitIdle(absl::Now() + kWait));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(2) + kCallCompletionGrace);
  const std::vector<std::string> lines = log.get();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(absl::StrContains(lines[0],
                                "request gone-1: ReleaseKv by request id on prefill "
                                "node 127.0.0.1:1"))
      << lines[0];
}

TEST(KvReleaserTest, DestroyingItWithACallInFlightLetsItLand) {
  FakePrefill prefill("p0", std::make_shared<PrefillScript>());
  Lines log;
  const absl::Time start = absl::Now();
  {
    KvReleaser releaser(absl::Seconds(5), log.fn());
    releaser.ReleaseRequest(Channel(prefill.address()), prefill.address(), "r", "r");
  }  // lets the call in flight land first
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(prefill.WaitForReleases(1, kWait));
}

}  // namespace
}  // namespace tandem::testing_router
