// Orderly operations through real processes: SIGTERM on a prefill node, a decode node or a router
// while requests stream. The signalled process drains (refuses new work, finishes what it has,
// --drain_timeout_s bounds it) and exits 0; with a second process of the role present no request
// fails, and every answer equals the single-process greedy reference. Two cases pin the drain to
// the moment work is parked between the roles: a prefill node signalled while decode nodes still
// hold its KV leases (waiting for decode capacity, then pulling), and a decode node signalled
// while requests wait in it for KV capacity. Two routers in front of the same nodes take the load
// through Tandem's failover client (client/router_failover.h): one of them drained reports
// NOT_SERVING first, refuses new requests with UNAVAILABLE, and the client carries on with the
// other.
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/router_failover.h"
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
// Deadline of each request of the steady load.
constexpr absl::Duration kRequestTimeout = absl::Seconds(60);

std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(RandomPrompt(5 + (i * 29) % 70, 300 + i));
  return prompts;
}

// One request of the load as the client saw it: its outcome, the router that answered last and
// how many routers refused it first (failover client only).
struct Sent {
  GenerateOutcome out;
  int router = 0;
  int refusals = 0;
};
using SendFn = std::function<Sent(const v1::GenerateRequest&)>;

// Through the cluster's (first) router.
SendFn ThroughRouter(LocalCluster* cluster) {
  return [cluster](const v1::GenerateRequest& request) {
    return Sent{cluster->Generate(request, kRequestTimeout)};
  };
}

// Through the failover client over every router of the cluster.
SendFn ThroughFailover(const RouterFailover* routers) {
  return [routers](const v1::GenerateRequest& request) {
    Sent sent;
    const RouterFailover::Outcome outcome =
        routers->Generate(request, absl::Now() + kRequestTimeout,
                          [&sent](const v1::GenerateResponse& r, grpc::ClientContext&) {
                            AddResponse(r, &sent.out);
                          });
    sent.out.status = outcome.status;
    sent.router = outcome.router;
    sent.refusals = outcome.refusals;
    return sent;
  };
}

// A steady stream of requests: `workers` threads send the prompts round robin until Stop().
class SteadyLoad {
 public:
  struct Result {
    size_t prompt = 0;
    Sent sent;
  };
  using Results = std::vector<Result>;

  SteadyLoad(SendFn send, std::vector<std::vector<int32_t>> prompts, int32_t tokens, int workers)
      : send_(std::move(send)), prompts_(std::move(prompts)), tokens_(tokens), workers_(workers) {
    for (int w = 0; w < workers; ++w) {
      threads_.emplace_back([this, w] {
        for (size_t i = static_cast<size_t>(w); !stop_.load(); i += static_cast<size_t>(workers_)) {
          Result r;
          r.prompt = i % prompts_.size();
          r.sent = send_(IdsRequest(prompts_[r.prompt], tokens_));
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
  // True once `done(results so far)` holds; false when `timeout` passed first.
  bool WaitUntil(const std::function<bool(const Results&)>& done, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    const auto holds = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done(results_); };
    return mu_.AwaitWithTimeout(absl::Condition(&holds), timeout);
  }
  // True once at least `n` requests have completed; false when `timeout` passed first.
  bool WaitCompleted(int n, absl::Duration timeout) {
    return WaitUntil([n](const Results& r) { return static_cast<int>(r.size()) >= n; }, timeout);
  }
  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  Results results() {
    absl::MutexLock lock(&mu_);
    return results_;
  }

 private:
  const SendFn send_;
  const std::vector<std::vector<int32_t>> prompts_;
  const int32_t tokens_;
  const int workers_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  Results results_ ABSL_GUARDED_BY(mu_);
};

void ExpectAnswer(const GenerateOutcome& out, const std::vector<int32_t>& reference,
                  const std::string& what, LocalCluster& cluster) {
  ASSERT_TRUE(out.status.ok()) << what << " failed: " << out.status.error_code() << " "
                               << out.status.error_message() << "\n"
                               << cluster.LogTails(30);
  ASSERT_EQ(out.indices.size(), reference.size()) << what;
  for (size_t k = 0; k < reference.size(); ++k) {
    ASSERT_EQ(out.indices[k], static_cast<int32_t>(k)) << what << ": duplicate or gap";
  }
  EXPECT_EQ(out.tokens, reference) << what;
}

void ExpectAllSucceeded(const SteadyLoad::Results& results,
                        const std::vector<std::vector<int32_t>>& reference, LocalCluster& cluster) {
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(ExpectAnswer(results[i].sent.out, reference[results[i].prompt],
                                         absl::StrCat("request ", i), cluster));
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

// After the drained process exited: the others carry 8 more requests, then the load stops, every
// answer equals the reference and the nodes end idle (no block or lease left behind).
void ExpectTheOthersCarryOn(SteadyLoad& load, const std::vector<std::vector<int32_t>>& reference,
                            LocalCluster& cluster) {
  const int after_exit = load.completed();
  ASSERT_TRUE(load.WaitCompleted(after_exit + 8, absl::Seconds(120))) << cluster.LogTails();
  load.Stop();
  ASSERT_NO_FATAL_FAILURE(ExpectAllSucceeded(load.results(), reference, cluster));
  const absl::Status idle = cluster.WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << cluster.LogTails();
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

// A node drained under load, the shape every node case shares: a steady load of `workers`
// streams of `tokens` tokens through the router until `warm` requests completed; `before_signal`
// waits (bounded) for the moment the case is about; SIGTERM on node 0 of `role`;
// `while_draining` watches the drain; the node exits 0, drained, within its bound; `after_exit`
// reads its log; then the other node carries on (ExpectTheOthersCarryOn).
struct NodeDrain {
  ClusterSpec spec;
  std::string role;  // "prefill" or "decode"
  int32_t tokens = 48;
  int workers = 4;
  int warm = 4;
  std::function<void(LocalCluster&)> before_signal, while_draining, after_exit;
};

void RunNodeDrain(const NodeDrain& c) {
  const std::vector<std::vector<int32_t>> prompts = Prompts();
  const auto reference = ReferenceGreedy(SyntheticModelPath(), prompts, c.tokens);
  auto cluster = StartOrDie(c.spec);
  ASSERT_NE(cluster, nullptr);
  SteadyLoad load(ThroughRouter(cluster.get()), prompts, c.tokens, c.workers);
  ASSERT_TRUE(load.WaitCompleted(c.warm, absl::Seconds(120))) << cluster->LogTails();
  if (c.before_signal) {
    ASSERT_NO_FATAL_FAILURE(c.before_signal(*cluster));
  }
  cluster->Terminate(c.role, 0);
  if (c.while_draining) {
    ASSERT_NO_FATAL_FAILURE(c.while_draining(*cluster));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectDrainedExit(*cluster, c.role, 0));
  if (c.after_exit) {
    ASSERT_NO_FATAL_FAILURE(c.after_exit(*cluster));
  }
  ExpectTheOthersCarryOn(load, reference, *cluster);
}

TEST(DrainTest, SigtermOnAPrefillNodeUnderLoadFailsNoRequest) {
  RunNodeDrain({.spec = TwoByTwo(), .role = "prefill", .tokens = 12, .warm = 8});
}

TEST(DrainTest, SigtermOnADecodeNodeLetsItsStreamsFinishAndFailsNoRequest) {
  NodeDrain c{.spec = TwoByTwo(), .role = "decode"};
  // SIGTERM decode0 while it runs a stream (bounded wait for one to be running there).
  c.before_signal = [](LocalCluster& cluster) {
    const std::string target = cluster.decode_addresses()[0];
    bool running = false;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!running && absl::Now() < deadline) {
      absl::StatusOr<std::vector<InstanceLoadView>> loads = cluster.Loads();
      ASSERT_TRUE(loads.ok()) << loads.status();
      for (const InstanceLoadView& v : *loads) {
        if (v.address == target && v.load.running() > 0) running = true;
      }
      if (!running) absl::SleepFor(absl::Milliseconds(10));  // poll interval, bounded above
    }
    ASSERT_TRUE(running) << "decode0 never ran a stream\n" << cluster.LogTails();
  };
  // A stream that was running when the signal came completed on the draining node: its log has
  // a successful Decode line after the signal.
  c.after_exit = [](LocalCluster& cluster) {
    const std::string log = cluster.Log("decode", 0);
    const size_t signal_at = log.find("draining");
    ASSERT_NE(signal_at, std::string::npos);
    EXPECT_NE(log.find("outcome=OK", signal_at), std::string::npos)
        << "no stream finished on decode0 during its drain:\n"
        << log.substr(signal_at);
  };
  RunNodeDrain(c);
}

TEST(DrainTest, SigtermOnAPrefillNodeWithLeasesOutstandingServesThemAndFailsNoRequest) {
  NodeDrain c{.spec = TightDecodeCapacity(), .role = "prefill", .workers = 6, .warm = 6};
  // Signal prefill0 at a moment decode nodes hold at least two of its leases.
  c.before_signal = [](LocalCluster& cluster) {
    ASSERT_TRUE(AwaitStatus(cluster.prefill_addresses()[0], true, absl::Seconds(60),
                            [](const v1::InstanceStatus& s) { return s.load().leases() >= 2; }))
        << "prefill0 never had two leases out\n"
        << cluster.LogTails();
  };
  // While it drains, its leases are still out at first and are then served and released: the
  // node keeps answering Status (draining) until they are gone.
  c.while_draining = [](LocalCluster& cluster) {
    const std::string prefill0 = cluster.prefill_addresses()[0];
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
      most_leases_while_draining =
          std::max<int64_t>(most_leases_while_draining, st->load().leases());
      saw_zero = st->load().leases() == 0;
    }
    EXPECT_GT(most_leases_while_draining, 0)
        << "prefill0 had no lease out when its drain began: the case was not exercised";
  };
  RunNodeDrain(c);
}

TEST(DrainTest, SigtermOnADecodeNodeWithRequestsWaitingForCapacityFailsNoRequest) {
  NodeDrain c{.spec = TightDecodeCapacity(), .role = "decode", .workers = 6, .warm = 6};
  c.before_signal = [](LocalCluster& cluster) {
    ASSERT_TRUE(AwaitStatus(cluster.decode_addresses()[0], false, absl::Seconds(60),
                            [](const v1::InstanceStatus& s) { return s.load().queued() >= 1; }))
        << "decode0 never had a request waiting\n"
        << cluster.LogTails();
  };
  RunNodeDrain(c);
}

// Streams on `router`, each held by its reader after its first token until Release(): so they are
// in flight (from the client's side) whenever the test signals.
class HeldStreams {
 public:
  HeldStreams(LocalCluster* cluster, const std::vector<std::vector<int32_t>>& prompts,
              int32_t tokens, int router) {
    outs_.resize(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      threads_.emplace_back([this, cluster, request = IdsRequest(prompts[i], tokens), router, i] {
        outs_[i] = cluster->Generate(
            request, kRequestTimeout,
            [this](int32_t index, grpc::ClientContext&) {
              if (index != 0) return;
              absl::MutexLock lock(&mu_);
              ++started_;
              mu_.AwaitWithTimeout(absl::Condition(&released_), kRequestTimeout);
            },
            router);
      });
    }
  }
  ~HeldStreams() { Release(); }

  // True once every stream has its first token; false when `timeout` passed first.
  bool WaitStarted(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    const auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return started_ == static_cast<int>(outs_.size());
    };
    return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
  }
  // Lets the streams read on, waits for them and returns what each received.
  const std::vector<GenerateOutcome>& Release() {
    {
      absl::MutexLock lock(&mu_);
      released_ = true;
    }
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    return outs_;
  }

 private:
  absl::Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<GenerateOutcome> outs_;
  std::vector<std::thread> threads_;
};

// New requests straight to the draining router are refused with UNAVAILABLE once it took the
// signal (one may still be accepted in the moment before; it must then succeed). Bounded: each
// attempt has a 5 s deadline.
void ExpectRefused(LocalCluster& cluster, int router, const std::vector<int32_t>& prompt) {
  bool refused = false;
  for (int attempt = 0; attempt < 50 && !refused; ++attempt) {
    const GenerateOutcome fresh =
        cluster.Generate(IdsRequest(prompt, 4), absl::Seconds(5), nullptr, router);
    if (fresh.status.ok()) continue;
    EXPECT_EQ(fresh.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << fresh.status.error_message();
    refused = true;
  }
  EXPECT_TRUE(refused) << cluster.LogTails();
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
  // Four streams in flight when the signal arrives.
  const std::vector<std::vector<int32_t>> held_prompts(prompts.begin(), prompts.begin() + 4);
  HeldStreams held(cluster.get(), held_prompts, kTokens, 0);
  ASSERT_TRUE(held.WaitStarted(absl::Seconds(60))) << cluster->LogTails();
  cluster->Terminate("router", 0);
  ExpectRefused(*cluster, 0, prompts[5]);
  const std::vector<GenerateOutcome>& outs = held.Release();
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(
        ExpectAnswer(outs[i], reference[i], absl::StrCat("stream ", i), *cluster));
  }
  ExpectDrainedExit(*cluster, "router", 0);
}

// Two routers in front of the same nodes, the load spread over both by the failover client.
// SIGTERM on router A: its health reports NOT_SERVING while its streams are still in flight, it
// refuses new requests with UNAVAILABLE and the client sends them to router B, its streams
// complete, it exits 0 within the drain timeout, and no request fails.
TEST(DrainTest, SigtermOnOneOfTwoRoutersUnderLoadFailsNoRequest) {
  const std::vector<std::vector<int32_t>> prompts = Prompts();
  const int32_t kTokens = 24;
  // A's held streams are long, so A still has work to finish when its health is checked.
  const int32_t kLongTokens = 128;
  const std::vector<std::vector<int32_t>> held_prompts(prompts.begin(), prompts.begin() + 2);
  const auto reference = ReferenceGreedy(SyntheticModelPath(), prompts, kTokens);
  const auto long_reference = ReferenceGreedy(SyntheticModelPath(), held_prompts, kLongTokens);
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{kDrainFlag}}};
  spec.decode = {NodeSpec{{kDrainFlag}}};
  spec.router_flags = {kDrainFlag};
  spec.routers = 2;
  auto cluster = StartOrDie(spec);
  ASSERT_NE(cluster, nullptr);
  const std::string router_a = cluster->router_addresses()[0];
  const RouterFailover routers({cluster->router_stub(0), cluster->router_stub(1)});

  SteadyLoad load(ThroughFailover(&routers), prompts, kTokens, 4);
  // The load is spread over both routers.
  ASSERT_TRUE(load.WaitUntil(
      [](const SteadyLoad::Results& results) {
        int served[2] = {0, 0};
        for (const SteadyLoad::Result& r : results) ++served[r.sent.router == 1 ? 1 : 0];
        return served[0] >= 4 && served[1] >= 4;
      },
      absl::Seconds(120)))
      << cluster->LogTails();
  const absl::StatusOr<bool> serving = cluster->HealthServing(router_a, absl::Seconds(5));
  ASSERT_TRUE(serving.ok() && *serving) << serving.status();
  // Started right before the signal, A's long streams keep it draining for a while.
  HeldStreams held(cluster.get(), held_prompts, kLongTokens, /*router=*/0);
  ASSERT_TRUE(held.WaitStarted(absl::Seconds(60))) << cluster->LogTails();

  cluster->Terminate("router", 0);
  const absl::Time signalled_at = absl::Now();
  // Health first: NOT_SERVING while A is still up (its streams are in flight). Bounded: A exits
  // within kExitBound, after which the check fails.
  bool not_serving = false;
  const absl::Time deadline = absl::Now() + kExitBound;
  while (!not_serving && absl::Now() < deadline) {
    const absl::StatusOr<bool> health = cluster->HealthServing(router_a, absl::Seconds(2));
    ASSERT_TRUE(health.ok()) << "router A stopped answering before it reported NOT_SERVING: "
                             << health.status() << "\n"
                             << cluster->Log("router", 0);
    not_serving = !*health;  // else the signal is on its way: poll again at once (bounded)
  }
  ASSERT_TRUE(not_serving) << cluster->LogTails();
  ExpectRefused(*cluster, 0, prompts[5]);
  // The failover client moved on: a request refused by A was served by B.
  EXPECT_TRUE(load.WaitUntil(
      [](const SteadyLoad::Results& results) {
        return std::any_of(results.begin(), results.end(), [](const SteadyLoad::Result& r) {
          return r.sent.refusals > 0 && r.sent.router == 1 && r.sent.out.status.ok();
        });
      },
      absl::Seconds(60)))
      << "no request went to router B after router A refused it\n"
      << cluster->LogTails();
  const std::vector<GenerateOutcome>& outs = held.Release();
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(
        ExpectAnswer(outs[i], long_reference[i], absl::StrCat("held stream ", i), *cluster));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectDrainedExit(*cluster, "router", 0));
  const absl::Duration drained_in = absl::Now() - signalled_at;
  ExpectTheOthersCarryOn(load, reference, *cluster);
  int served[2] = {0, 0}, failed_over = 0;
  const SteadyLoad::Results results = load.results();
  for (const SteadyLoad::Result& r : results) {
    ++served[r.sent.router == 1 ? 1 : 0];
    failed_over += r.sent.refusals > 0;
  }
  std::printf(
      "two routers: %zu requests + %zu held streams, all correct; served by A %d, by B %d; "
      "refused by A and served by B %d; A exited 0 %s after SIGTERM (held streams included)\n",
      results.size(), outs.size(), served[0], served[1], failed_over,
      absl::FormatDuration(drained_in).c_str());
}

}  // namespace
}  // namespace tandem::testing
