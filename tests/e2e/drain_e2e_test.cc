// Orderly operations through real processes: SIGTERM on a prefill node, a decode node or the
// router while requests stream. The signalled process drains (refuses new work, finishes what it
// has, --drain_timeout_s bounds it) and exits 0; with a second node of the role present no request
// fails, and every answer equals the single-process greedy reference. Two cases pin the drain to
// the moment work is parked between the roles: a prefill node signalled while decode nodes still
// hold its KV leases (waiting for decode capacity, then pulling), and a decode node signalled
// while requests wait in it for KV capacity.
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

constexpr int kDrainTimeoutS = 20;
// The drained process must be gone within its drain timeout (plus process exit).
constexpr absl::Duration kExitBound = absl::Seconds(kDrainTimeoutS + 5);

std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(RandomPrompt(5 + (i * 29) % 70, 300 + i));
  return prompts;
}

// A steady stream of requests: `workers` threads send the prompts round robin until Stop().
class SteadyLoad {
 public:
  struct Result {
    size_t prompt = 0;
    GenerateOutcome out;
  };

  SteadyLoad(LocalCluster* cluster, std::vector<std::vector<int32_t>> prompts, int32_t tokens,
             int workers)
      : cluster_(cluster), prompts_(std::move(prompts)), tokens_(tokens), workers_(workers) {
    for (int w = 0; w < workers; ++w) {
      threads_.emplace_back([this, w] {
        for (size_t i = static_cast<size_t>(w); !stop_.load(); i += static_cast<size_t>(workers_)) {
          Result r;
          r.prompt = i % prompts_.size();
          r.out = cluster_->Generate(IdsRequest(prompts_[r.prompt], tokens_), absl::Seconds(60));
          absl::MutexLock lock(&mu_);
          results_.push_back(std::move(r));
        }
      });
    }
  }
  ~SteadyLoad() { Stop(); }

  int completed() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(results_.size());
  }
  // True once at least `n` requests have completed; false when `timeout` passed first.
  bool WaitCompleted(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    const auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(results_.size()) >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  std::vector<Result> results() {
    absl::MutexLock lock(&mu_);
    return results_;
  }

 private:
  LocalCluster* cluster_;
  const std::vector<std::vector<int32_t>> prompts_;
  const int32_t tokens_;
  const int workers_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::vector<Result> results_ ABSL_GUARDED_BY(mu_);
};

void ExpectAllSucceeded(const std::vector<SteadyLoad::Result>& results,
                        const std::vector<std::vector<int32_t>>& reference, int32_t tokens,
                        LocalCluster& cluster) {
  for (size_t i = 0; i < results.size(); ++i) {
    const SteadyLoad::Result& r = results[i];
    ASSERT_TRUE(r.out.status.ok()) << "request " << i << " failed: " << r.out.status.error_code()
                                   << " " << r.out.status.error_message() << "\n"
                                   << cluster.LogTails(30);
    ASSERT_EQ(r.out.indices.size(), static_cast<size_t>(tokens)) << "request " << i;
    for (int32_t k = 0; k < tokens; ++k) ASSERT_EQ(r.out.indices[k], k) << "duplicate or gap";
    EXPECT_EQ(r.out.tokens, reference[r.prompt]) << "request " << i;
  }
}

// Exit status 0, within the drain bound, and the log says the drain finished (not timed out).
void ExpectDrainedExit(LocalCluster& cluster, const std::string& role, int index) {
  const absl::Time start = absl::Now();
  const absl::StatusOr<int> status = cluster.WaitExit(role, index, kExitBound);
  ASSERT_TRUE(status.ok()) << status.status() << "\n" << cluster.LogTails(30);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << role << index << " ended with wait status " << *status << "\n"
      << cluster.LogTails(30);
  EXPECT_LT(absl::Now() - start, kExitBound);
  const std::string log = cluster.Log(role, index);
  EXPECT_TRUE(absl::StrContains(log, "draining")) << log;
  EXPECT_TRUE(absl::StrContains(log, "drained")) << log;
  EXPECT_FALSE(absl::StrContains(log, "drain timed out")) << log;
}

const std::string kDrainFlag = absl::StrCat("--drain_timeout_s=", kDrainTimeoutS);

ClusterSpec TwoByTwo() {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{kDrainFlag}}, NodeSpec{{kDrainFlag}}};
  spec.decode = {NodeSpec{{kDrainFlag}}, NodeSpec{{kDrainFlag}}};
  spec.router_flags = {"--prefill_policy=round_robin", "--decode_policy=round_robin", kDrainFlag};
  return spec;
}

// Two prefill and two decode nodes whose decode KV pools hold one of the test's requests each
// (8 blocks of 16 tokens; a request takes up to 8): under a load of six streams, requests queue at
// the decode nodes for capacity while the prefill node's lease on their KV is held (and renewed)
// — so a prefill node always has leases out, a decode node always has requests waiting.
ClusterSpec TightDecodeCapacity() {
  ClusterSpec spec = TwoByTwo();
  for (NodeSpec& d : spec.decode) d.flags.push_back("--kv_budget_mb=0.07");
  return spec;
}

// One node's Status (served until the node process stops, draining or not).
absl::StatusOr<v1::InstanceStatus> NodeStatus(const std::string& address, bool prefill) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::InstanceStatus st;
  const grpc::Status s =
      prefill ? v1::PrefillService::NewStub(channel)->Status(&ctx, v1::StatusRequest(), &st)
              : v1::DecodeService::NewStub(channel)->Status(&ctx, v1::StatusRequest(), &st);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat(address, ": ", s.error_message()));
  return st;
}

// Polls (bounded) until `pred` holds for the node's Status; false when `timeout` passed first.
bool AwaitStatus(const std::string& address, bool prefill, absl::Duration timeout,
                 const std::function<bool(const v1::InstanceStatus&)>& pred) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    absl::StatusOr<v1::InstanceStatus> st = NodeStatus(address, prefill);
    if (st.ok() && pred(*st)) return true;
    absl::SleepFor(absl::Milliseconds(2));  // poll interval, bounded by the deadline
  }
  return false;
}

std::unique_ptr<LocalCluster> StartOrDie(const ClusterSpec& spec) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(spec);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(DrainTest, SigtermOnAPrefillNodeUnderLoadFailsNoRequest) {
  const std::vector<std::vector<int32_t>> prompts = Prompts();
  const int32_t kTokens = 12;
  const auto reference = ReferenceGreedy(SyntheticModelPath(), prompts, kTokens);
  auto cluster = StartOrDie(TwoByTwo());
  ASSERT_NE(cluster, nullptr);
  SteadyLoad load(cluster.get(), prompts, kTokens, 4);
  ASSERT_TRUE(load.WaitCompleted(8, absl::Seconds(120))) << cluster->LogTails();
  cluster->Terminate("prefill", 0);
  ExpectDrainedExit(*cluster, "prefill", 0);
  // The remaining prefill node carries the load.
  const int after_exit = load.completed();
  ASSERT_TRUE(load.WaitCompleted(after_exit + 8, absl::Seconds(120))) << cluster->LogTails();
  load.Stop();
  ExpectAllSucceeded(load.results(), reference, kTokens, *cluster);
  const absl::Status idle = cluster->WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << cluster->LogTails();
}

TEST(DrainTest, SigtermOnADecodeNodeLetsItsStreamsFinishAndFailsNoRequest) {
  const std::vector<std::vector<int32_t>> prompts = Prompts();
  const int32_t kTokens = 48;
  const auto reference = ReferenceGreedy(SyntheticModelPath(), prompts, kTokens);
  auto cluster = StartOrDie(TwoByTwo());
  ASSERT_NE(cluster, nullptr);
  SteadyLoad load(cluster.get(), prompts, kTokens, 4);
  ASSERT_TRUE(load.WaitCompleted(4, absl::Seconds(120))) << cluster->LogTails();
  // SIGTERM decode0 while it runs a stream (bounded wait for one to be running there).
  const std::string target = cluster->decode_addresses()[0];
  bool running = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!running && absl::Now() < deadline) {
    absl::StatusOr<std::vector<InstanceLoadView>> loads = cluster->Loads();
    ASSERT_TRUE(loads.ok()) << loads.status();
    for (const InstanceLoadView& v : *loads) {
      if (v.address == target && v.load.running() > 0) running = true;
    }
    if (!running) absl::SleepFor(absl::Milliseconds(10));  // poll interval, bounded above
  }
  ASSERT_TRUE(running) << "decode0 never ran a stream\n" << cluster->LogTails();
  cluster->Terminate("decode", 0);
  ExpectDrainedExit(*cluster, "decode", 0);
  // A stream that was running when the signal came completed on the draining node: its log has
  // a successful Decode line after the signal.
  const std::string log = cluster->Log("decode", 0);
  const size_t signal_at = log.find("draining");
  ASSERT_NE(signal_at, std::string::npos);
  EXPECT_NE(log.find("outcome=OK", signal_at), std::string::npos)
      << "no stream finished on decode0 during its drain:\n"
      << log.substr(signal_at);
  const int after_exit = load.completed();
  ASSERT_TRUE(load.WaitCompleted(after_exit + 8, absl::Seconds(120))) << cluster->LogTails();
  load.Stop();
  ExpectAllSucceeded(load.results(), reference, kTokens, *cluster);
  const absl::Status idle = cluster->WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << cluster->LogTails();
}

TEST(DrainTest, SigtermOnAPrefillNodeWithLeasesOutstandingServesThemAndFailsNoRequest) {
  const std::vector<std::vector<int32_t>> prompts = Prompts();
  const int32_t kTokens = 48;
  const auto reference = ReferenceGreedy(SyntheticModelPath(), prompts, kTokens);
  auto cluster = StartOrDie(TightDecodeCapacity());
  ASSERT_NE(cluster, nullptr);
  const std::string prefill0 = cluster->prefill_addresses()[0];
  SteadyLoad load(cluster.get(), prompts, kTokens, 6);
  ASSERT_TRUE(load.WaitCompleted(6, absl::Seconds(120))) << cluster->LogTails();
  // Signal prefill0 at a moment decode nodes hold at least two of its leases.
  ASSERT_TRUE(AwaitStatus(prefill0, true, absl::Seconds(60),
                          [](const v1::InstanceStatus& s) { return s.load().leases() >= 2; }))
      << "prefill0 never had two leases out\n"
      << cluster->LogTails();
  cluster->Terminate("prefill", 0);
  // While it drains, its leases are still out at first and are then served and released: the
  // node keeps answering Status (draining) until they are gone.
  int64_t most_leases_while_draining = 0;
  bool saw_zero = false;
  const absl::Time deadline = absl::Now() + kExitBound;
  while (absl::Now() < deadline && !saw_zero) {
    absl::StatusOr<v1::InstanceStatus> st = NodeStatus(prefill0, true);
    if (!st.ok()) break;  // the node has stopped serving
    if (!st->draining()) {
      absl::SleepFor(absl::Milliseconds(1));  // the signal is on its way; poll, bounded
      continue;
    }
    most_leases_while_draining = std::max<int64_t>(most_leases_while_draining, st->load().leases());
    saw_zero = st->load().leases() == 0;
  }
  EXPECT_GT(most_leases_while_draining, 0)
      << "prefill0 had no lease out when its drain began: the case was not exercised";
  ExpectDrainedExit(*cluster, "prefill", 0);
  const int after_exit = load.completed();
  ASSERT_TRUE(load.WaitCompleted(after_exit + 8, absl::Seconds(120))) << cluster->LogTails();
  load.Stop();
  ExpectAllSucceeded(load.results(), reference, kTokens, *cluster);
  const absl::Status idle = cluster->WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << cluster->LogTails();
}

TEST(DrainTest, SigtermOnADecodeNodeWithRequestsWaitingForCapacityFailsNoRequest) {
  const std::vector<std::vector<int32_t>> prompts = Prompts();
  const int32_t kTokens = 48;
  const auto reference = ReferenceGreedy(SyntheticModelPath(), prompts, kTokens);
  auto cluster = StartOrDie(TightDecodeCapacity());
  ASSERT_NE(cluster, nullptr);
  const std::string decode0 = cluster->decode_addresses()[0];
  SteadyLoad load(cluster.get(), prompts, kTokens, 6);
  ASSERT_TRUE(load.WaitCompleted(6, absl::Seconds(120))) << cluster->LogTails();
  ASSERT_TRUE(AwaitStatus(decode0, false, absl::Seconds(60),
                          [](const v1::InstanceStatus& s) { return s.load().queued() >= 1; }))
      << "decode0 never had a request waiting\n"
      << cluster->LogTails();
  cluster->Terminate("decode", 0);
  ExpectDrainedExit(*cluster, "decode", 0);
  const int after_exit = load.completed();
  ASSERT_TRUE(load.WaitCompleted(after_exit + 8, absl::Seconds(120))) << cluster->LogTails();
  load.Stop();
  ExpectAllSucceeded(load.results(), reference, kTokens, *cluster);
  const absl::Status idle = cluster->WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << cluster->LogTails();
}

TEST(DrainTest, SigtermOnTheRouterFinishesStreamsInFlightAndRefusesNewOnes) {
  const std::vector<std::vector<int32_t>> prompts = Prompts();
  const int32_t kTokens = 48;
  const auto reference = ReferenceGreedy(SyntheticModelPath(), prompts, kTokens);
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{}};
  spec.decode = {NodeSpec{}};
  spec.router_flags = {kDrainFlag};
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  // Four streams, each held by its reader after its first token until the router got SIGTERM:
  // so all four are in flight (from the client's side) when the signal arrives.
  constexpr int kStreams = 4;
  absl::Mutex mu;
  int started = 0;
  bool signalled = false;
  std::vector<GenerateOutcome> outs(kStreams);
  std::vector<std::thread> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.emplace_back([&, i] {
      outs[i] =
          cluster->Generate(IdsRequest(prompts[i], kTokens), absl::Seconds(60),
                            [&](int32_t index, grpc::ClientContext&) {
                              if (index != 0) return;
                              absl::MutexLock lock(&mu);
                              ++started;
                              mu.AwaitWithTimeout(absl::Condition(&signalled), absl::Seconds(60));
                            });
    });
  }
  {
    absl::MutexLock lock(&mu);
    const auto all_started = [&]()
                                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return started == kStreams; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all_started), absl::Seconds(60)))
        << cluster->LogTails();
  }
  cluster->Terminate("router", 0);
  // New requests are refused once the router took the signal (one may still be accepted in the
  // moment before; it must then succeed). Bounded: each attempt has a 5 s deadline.
  bool refused = false;
  for (int attempt = 0; attempt < 50 && !refused; ++attempt) {
    const GenerateOutcome fresh = cluster->Generate(IdsRequest(prompts[5], 4), absl::Seconds(5));
    if (fresh.status.ok()) continue;
    EXPECT_EQ(fresh.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << fresh.status.error_message();
    refused = true;
  }
  EXPECT_TRUE(refused) << cluster->LogTails();
  {
    absl::MutexLock lock(&mu);
    signalled = true;
  }
  for (std::thread& t : streams) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(outs[i].status.ok()) << i << ": " << outs[i].status.error_message() << "\n"
                                     << cluster->LogTails();
    EXPECT_EQ(outs[i].tokens, reference[i]) << "stream " << i;
  }
  ExpectDrainedExit(*cluster, "router", 0);
}

}  // namespace
}  // namespace tandem::testing
