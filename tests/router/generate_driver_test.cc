// The Generate driver (router/generate_driver.h) against an in-process FakeNodeClient and a
// FakeClock: retry, resume after a decode failure, blame carried as data, deadlines and idle
// timeouts, colocated and pipelined calls, n > 1 -- no sockets, no sleeping.
//
// The fake nodes follow one rule, so every resume can be checked token for token: the token at
// generated position k is 100 + k (choice c: 100 + 50·c + k). A prefill with sample_step s
// answers 100 + s; a decode call with next_step k streams 100 + k, 100 + k + 1, ... until its
// budget (first_token included) is spent, then a finish (length).
#include "router/generate_driver.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "common/kv_source_failure.h"
#include "router/clock.h"
#include "router/fake/fake_clock.h"
#include "router/fake/fake_node_client.h"
#include "router/node_pool.h"
#include "tests/router/test_model.h"

namespace tandem {
namespace {

using testing_router::kTestModelName;
using testing_router::MakeTestModel;

constexpr absl::Duration kGap = absl::Milliseconds(10);  // between a fake decode's events

class RecordingSink final : public GenerateSink {
 public:
  void OnToken(GeneratedToken token) override { tokens.push_back(std::move(token)); }
  void OnChoiceEnd(ChoiceEnded end) override { ends.push_back(std::move(end)); }
  void OnDone(GenerateDone d) override { done = std::move(d); }
  std::vector<int32_t> Tokens(int32_t choice = 0) const {
    std::vector<int32_t> ids;
    for (const GeneratedToken& t : tokens) {
      if (t.choice == choice) ids.push_back(t.id);
    }
    return ids;
  }
  const GenerateDone* Final() const { return done.has_value() ? &*done : nullptr; }
  std::vector<GeneratedToken> tokens;
  std::vector<ChoiceEnded> ends;
  std::optional<GenerateDone> done;
};

// Tokens 100 + first .. 100 + first + count - 1.
std::vector<int32_t> Seq(int32_t first, int32_t count, int32_t base = 100) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back(base + first + i);
  return ids;
}

v1::PrefillResponse FakePrefill(const std::string& address, const v1::PrefillRequest& request) {
  v1::PrefillResponse response;
  const int32_t step = static_cast<int32_t>(request.sample_step());
  response.set_first_token(100 + step);
  for (int32_t c = 0; c < request.n(); ++c) response.add_choice_first_tokens(100 + 50 * c + step);
  v1::KvHandle* kv = response.mutable_kv();
  kv->set_request_id(request.request_id());
  kv->set_prefill_address(address);
  kv->set_engine_id(absl::StrCat("engine@", address));
  kv->set_generation(7);
  response.set_kv_pending(request.early_handle());
  return response;
}

StreamStep<v1::DecodeEvent> ChoiceEvent(absl::Duration after, int32_t choice, int32_t token) {
  StreamStep<v1::DecodeEvent> step = TokenAt(after, token);
  step.message->set_choice(choice);
  return step;
}

// The decode node of the rule above, `gap` between events.
StreamScript<v1::DecodeEvent> FakeDecode(const v1::DecodeRequest& request,
                                         absl::Duration gap = kGap) {
  StreamScript<v1::DecodeEvent> script;
  const int32_t k = static_cast<int32_t>(request.next_step());
  absl::Duration at;
  if (request.choices_size() > 0) {
    for (int32_t i = 0; i + 1 < request.max_new_tokens(); ++i) {
      for (const v1::DecodeChoice& c : request.choices()) {
        script.push_back(ChoiceEvent(at += gap, c.index(), 100 + 50 * c.index() + k + i));
      }
    }
    for (const v1::DecodeChoice& c : request.choices()) {
      script.push_back(FinishAt(at += gap, v1::FINISH_REASON_LENGTH));
      script.back().message->set_choice(c.index());
    }
    return script;
  }
  if (request.pipelined() || !request.prompt_ids().empty()) {
    // Pipelined or colocated: the first event is the prefill's token g[k-1].
    script.push_back(TokenAt(at += gap, 100 + k - 1));
  }
  for (int32_t i = 0; i + 1 < request.max_new_tokens(); ++i) {
    script.push_back(TokenAt(at += gap, 100 + k + i));
  }
  script.push_back(FinishAt(at += gap, v1::FINISH_REASON_LENGTH));
  return script;
}

class DriverTest : public testing::Test {
 protected:
  DriverTest()
      : model_(MakeTestModel(4096)),
        pool_(
            kTestModelName, PolicyKind::kLeastLoaded, PolicyKind::kLeastLoaded,
            [this](const std::string& line) { log_.push_back(line); },
            [](const std::string&) { return std::shared_ptr<grpc::Channel>(); }),
        nodes_(&clock_) {
    for (const char* p : {"p1", "p2"}) AddHealthy(p, v1::INSTANCE_ROLE_PREFILL);
    for (const char* d : {"d1", "d2"}) AddHealthy(d, v1::INSTANCE_ROLE_DECODE);
    options_.rpc_timeout = absl::Seconds(10);
    options_.decode_idle_timeout = absl::Seconds(2);
    options_.retry.initial_backoff = absl::Milliseconds(100);
    options_.retry.wait_budget = absl::ZeroDuration();
    nodes_.on_prefill = FakePrefill;
    nodes_.on_decode = [](const std::string&, const v1::DecodeRequest& r) { return FakeDecode(r); };
  }

  void AddHealthy(const std::string& address, v1::InstanceRole role) {
    ASSERT_TRUE(pool_.AddStatic(address, role).ok());
    v1::InstanceStatus status;
    status.set_role(role);
    status.set_model(kTestModelName);
    status.mutable_load()->set_free_blocks(100);
    status.mutable_load()->set_total_blocks(100);
    pool_.ReportStatus(address, role, status, clock_.Now());
  }

  static v1::GenerateRequest Request(int32_t max_tokens, int32_t n = 1) {
    v1::GenerateRequest request;
    request.mutable_token_ids()->add_ids(5);
    request.mutable_token_ids()->add_ids(6);
    request.mutable_token_ids()->add_ids(7);
    request.set_max_tokens(max_tokens);
    request.set_n(n);
    request.set_request_id("r1");
    return request;
  }

  absl::Status Generate(const v1::GenerateRequest& request) {
    RouterDeps deps{model_.get(), &pool_, options_,
                    [this](const std::string& line) { log_.push_back(line); }, &counter_};
    deps.nodes = &nodes_;
    deps.clock = driver_clock_;
    start_ = driver_clock_->Now();
    const grpc::Status status =
        RunGenerate(deps, request, start_ + client_timeout_, cancel_, &sink_);
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }

  FakeClock clock_;
  Clock* driver_clock_ = &clock_;  // the driver's; the fake nodes keep clock_
  std::unique_ptr<ServedModel> model_;
  std::vector<std::string> log_;
  NodePool pool_;
  FakeNodeClient nodes_;
  RouterOptions options_;
  std::atomic<uint64_t> counter_{0};
  CancellationToken cancel_;
  RecordingSink sink_;
  absl::Duration client_timeout_ = absl::Minutes(5);
  absl::Time start_;
};

TEST_F(DriverTest, PrefillThenDecodeStreamsEveryTokenOnceWithBoundedCalls) {
  ASSERT_TRUE(Generate(Request(4)).ok());
  EXPECT_EQ(sink_.Tokens(), Seq(0, 4));
  ASSERT_NE(sink_.Final(), nullptr);
  EXPECT_EQ(sink_.Final()->finish_reason, "length");
  EXPECT_EQ(sink_.Final()->retries, 0);

  ASSERT_EQ(nodes_.prefills().size(), 1u);
  const auto prefill = nodes_.prefills()[0];
  EXPECT_EQ(prefill.deadline, prefill.at + options_.rpc_timeout);
  EXPECT_EQ(prefill.request_id, "r1");  // x-request-id: the client's id
  ASSERT_EQ(nodes_.decodes().size(), 1u);
  const auto decode = nodes_.decodes()[0];
  EXPECT_EQ(decode.request.first_token(), 100);
  EXPECT_EQ(decode.request.next_step(), 1u);
  EXPECT_EQ(decode.request.max_new_tokens(), 4);
  // rpc_timeout + idle · (max_new_tokens + 1)
  EXPECT_EQ(decode.deadline, decode.at + absl::Seconds(10) + absl::Seconds(2) * 5);
  EXPECT_FALSE(*decode.cancelled);
  // Every event was handled as it arrived (Relay: with gRPC, on the thread that received it).
  EXPECT_EQ(*decode.relayed, 4);
  EXPECT_TRUE(nodes_.releases().empty());  // the decode node took the KV
  // Time passed only as the fake decode node streamed: 4 events, kGap apart.
  EXPECT_EQ(sink_.Final()->total_us, absl::ToInt64Microseconds(4 * kGap));
}

TEST_F(DriverTest, DecodeDeadlineIsTheClientsWhenEarlier) {
  client_timeout_ = absl::Seconds(3);
  ASSERT_TRUE(Generate(Request(4)).ok());
  ASSERT_EQ(nodes_.decodes().size(), 1u);
  EXPECT_EQ(nodes_.decodes()[0].deadline, start_ + absl::Seconds(3));
  EXPECT_EQ(nodes_.prefills()[0].deadline, start_ + absl::Seconds(3));
}

TEST_F(DriverTest, UnavailablePrefillIsRetriedOnTheOtherNodeAfterTheBackoff) {
  std::string failed;
  nodes_.on_prefill =
      [&](const std::string& address,
          const v1::PrefillRequest& request) -> absl::StatusOr<v1::PrefillResponse> {
    if (failed.empty()) {
      failed = address;
      return absl::UnavailableError("connection refused");
    }
    return FakePrefill(address, request);
  };
  ASSERT_TRUE(Generate(Request(3)).ok());
  EXPECT_EQ(sink_.Tokens(), Seq(0, 3));
  EXPECT_EQ(sink_.Final()->retries, 1);
  const auto prefills = nodes_.prefills();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_NE(prefills[1].address, failed);
  // The second attempt waited the backoff after one failure: initial_backoff.
  EXPECT_EQ(prefills[1].at - prefills[0].at, absl::Milliseconds(100));
  // Another request id: a lease of the first attempt must not collide.
  EXPECT_NE(prefills[1].request.request_id(), prefills[0].request.request_id());
}

TEST_F(DriverTest, NonRetryablePrefillErrorReachesTheClientUnchanged) {
  nodes_.on_prefill = [](const std::string&,
                         const v1::PrefillRequest&) -> absl::StatusOr<v1::PrefillResponse> {
    return absl::ResourceExhaustedError("prompt too long for the pool");
  };
  const absl::Status status = Generate(Request(3));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "prompt too long for the pool");
  EXPECT_EQ(nodes_.prefills().size(), 1u);
}

TEST_F(DriverTest, DecodeFailureMidStreamResumesElsewhereWithEveryTokenOnce) {
  std::string broken;
  nodes_.on_decode = [&](const std::string& address, const v1::DecodeRequest& request) {
    StreamScript<v1::DecodeEvent> script = FakeDecode(request);
    if (!broken.empty()) return script;
    broken = address;
    script.resize(2);  // g[1], g[2] -- then the node dies
    script.push_back(EndAt<v1::DecodeEvent>(3 * kGap, absl::UnavailableError("socket closed")));
    return script;
  };
  ASSERT_TRUE(Generate(Request(6)).ok());
  EXPECT_EQ(sink_.Tokens(), Seq(0, 6));
  EXPECT_EQ(sink_.Final()->retries, 1);

  const auto decodes = nodes_.decodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_NE(decodes[1].address, broken);
  // k = 3 tokens streamed: prefill prompt + g[0..2) with sample_step 2, decode from g[2].
  const auto prefills = nodes_.prefills();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_EQ(prefills[1].request.prompt_ids_size(), 3 + 2);
  EXPECT_EQ(prefills[1].request.sample_step(), 2u);
  EXPECT_EQ(decodes[1].request.first_token(), 102);
  EXPECT_EQ(decodes[1].request.next_step(), 3u);
  EXPECT_EQ(decodes[1].request.max_new_tokens(), 6 - 2);
}

TEST_F(DriverTest, DecodeIdleTimeoutResumesAfterExactlyTheIdleTimeout) {
  bool stalled = false;
  nodes_.on_decode = [&](const std::string&, const v1::DecodeRequest& request) {
    StreamScript<v1::DecodeEvent> script = FakeDecode(request);
    if (stalled) return script;
    stalled = true;
    script.resize(1);
    script.push_back(TokenAt(kGap + absl::Seconds(60), 999));  // far beyond the idle timeout
    return script;
  };
  ASSERT_TRUE(Generate(Request(4)).ok());
  EXPECT_EQ(sink_.Tokens(), Seq(0, 4));
  const auto decodes = nodes_.decodes();
  ASSERT_EQ(decodes.size(), 2u);
  // The first call ended decode_idle_timeout after its last event; then the 100 ms backoff.
  EXPECT_EQ(decodes[1].at - decodes[0].at, kGap + absl::Seconds(2) + absl::Milliseconds(100));
}

TEST_F(DriverTest, IdleTimeoutWithNoAttemptLeftIsDeadlineExceededNamingTheNode) {
  options_.max_attempts = 1;
  nodes_.on_decode = [](const std::string&, const v1::DecodeRequest&) {
    return StreamScript<v1::DecodeEvent>{TokenAt(absl::Seconds(60), 101)};
  };
  const absl::Status status = Generate(Request(4));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("decode idle timeout"), std::string::npos) << status;
  EXPECT_NE(status.message().find("decode node d"), std::string::npos) << status;
  // The decode node never took the KV: the router released it.
  EXPECT_EQ(nodes_.releases().size(), 1u);
}

TEST_F(DriverTest, DecodeFailureBlamingItsKvSourceAvoidsThatPrefillNode) {
  std::string bad_prefill;
  nodes_.on_decode = [&](const std::string&, const v1::DecodeRequest& request) {
    if (!bad_prefill.empty()) return FakeDecode(request);
    bad_prefill = request.kv().prefill_address();
    // Blame as data: the message says nothing about the prefill node.
    KvSourceFailure source;
    source.engine_id = request.kv().engine_id();
    return StreamScript<v1::DecodeEvent>{
        EndAt<v1::DecodeEvent>(kGap, BlameKvSource(absl::UnavailableError("pull failed"), source))};
  };
  ASSERT_TRUE(Generate(Request(3)).ok());
  EXPECT_EQ(sink_.Tokens(), Seq(0, 3));
  const auto prefills = nodes_.prefills();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_EQ(prefills[0].address, bad_prefill);
  EXPECT_NE(prefills[1].address, bad_prefill);
  // The prefill node was reported; both decode nodes stay healthy.
  const v1::ClusterStatusResponse cluster = pool_.Snapshot(clock_.Now());
  for (const auto& node : cluster.nodes()) {
    EXPECT_EQ(node.healthy(), node.address() != bad_prefill) << node.address();
  }
}

TEST_F(DriverTest, ClientCancelDuringDecodeCancelsTheCallAndReleasesTheKv) {
  nodes_.on_decode = [&](const std::string&, const v1::DecodeRequest& request) {
    cancel_.Cancel();  // the client goes away as the call starts
    return FakeDecode(request);
  };
  const absl::Status status = Generate(Request(4));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  ASSERT_EQ(nodes_.decodes().size(), 1u);
  EXPECT_TRUE(*nodes_.decodes()[0].cancelled);
  // No event came: the router still owned the lease, and released it.
  ASSERT_EQ(nodes_.releases().size(), 1u);
  EXPECT_EQ(nodes_.releases()[0].request.generation(), 7u);
}

// The client leaves after the prefill answered (its first token and the KV handle) and before a
// decode call exists: no Decode call is made, and the lease the router owns is released at once,
// not left to expire.
TEST_F(DriverTest, ClientLeavingBetweenPrefillAndDecodeReleasesTheKvAtOnce) {
  nodes_.on_prefill = [&](const std::string& address, const v1::PrefillRequest& request) {
    cancel_.Cancel();
    return FakePrefill(address, request);
  };
  const absl::Status status = Generate(Request(4));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(nodes_.decodes().empty());
  ASSERT_EQ(nodes_.releases().size(), 1u);
  EXPECT_EQ(nodes_.releases()[0].request.generation(), 7u);
}

// On the real clock: a retry's backoff (an hour here) ends at the client's cancellation, which
// wakes the wait rather than being polled for; the request ends CANCELLED without another call.
TEST_F(DriverTest, ClientCancelDuringABackoffEndsTheRequestAtOnce) {
  driver_clock_ = RealClock();
  options_.retry.initial_backoff = absl::Hours(1);
  options_.retry.max_backoff = absl::Hours(1);
  std::thread client;
  nodes_.on_prefill = [&](const std::string&, const v1::PrefillRequest&) {
    client = std::thread([this] { cancel_.Cancel(); });  // as the driver starts backing off
    return absl::StatusOr<v1::PrefillResponse>(absl::UnavailableError("node restarting"));
  };
  const absl::Time began = absl::Now();
  const absl::Status status = Generate(Request(4));
  client.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - began, absl::Seconds(30));
  EXPECT_EQ(nodes_.prefills().size(), 1u);
  EXPECT_TRUE(nodes_.decodes().empty());
}

TEST_F(DriverTest, ColocatedFailureBeforeTheFirstTokenIsRetriedAfterItResumed) {
  options_.colocated = true;
  int calls = 0;
  nodes_.on_decode = [&](const std::string&, const v1::DecodeRequest& request) {
    StreamScript<v1::DecodeEvent> script = FakeDecode(request);
    if (++calls == 1) {  // dies before its first event: a prefill failure
      return StreamScript<v1::DecodeEvent>{
          EndAt<v1::DecodeEvent>(kGap, absl::UnavailableError("gone"))};
    }
    if (calls == 2) {  // dies after g[0], g[1]: a resume
      script.resize(2);
      script.push_back(EndAt<v1::DecodeEvent>(3 * kGap, absl::AbortedError("draining")));
    }
    return script;
  };
  ASSERT_TRUE(Generate(Request(5)).ok());
  EXPECT_EQ(sink_.Tokens(), Seq(0, 5));
  EXPECT_EQ(sink_.Final()->retries, 2);
  const auto decodes = nodes_.decodes();
  ASSERT_EQ(decodes.size(), 3u);
  EXPECT_TRUE(nodes_.prefills().empty());
  EXPECT_FALSE(decodes[1].request.resume());
  EXPECT_TRUE(decodes[2].request.resume());
  EXPECT_EQ(decodes[2].request.prompt_ids_size(), 3 + 1);  // prompt + g[0]
  EXPECT_EQ(decodes[2].request.first_token(), 101);
}

TEST_F(DriverTest, PipelinedFirstTokenComesFromTheWatchBeforeTheDecodeNodesFirstEvent) {
  options_.pipelined_transfer = true;
  nodes_.on_watch = [](const std::string&, const v1::WatchKvRequest&) {
    v1::KvProgress done;
    done.set_done(true);
    done.set_first_token(100);
    return StreamScript<v1::KvProgress>{{absl::Milliseconds(5), done, absl::OkStatus()}};
  };
  nodes_.on_decode = [](const std::string&, const v1::DecodeRequest& request) {
    return FakeDecode(request, absl::Milliseconds(40));  // pulls until 40 ms
  };
  ASSERT_TRUE(Generate(Request(3)).ok());
  EXPECT_EQ(sink_.Tokens(), Seq(0, 3));
  // The watch's token, not the decode node's (40 ms), and the moment it arrives (5 ms): the wait
  // for the decode's first event is woken by the watch's arrival. (When that wait was a 2 ms
  // read of the decode stream between looks at the watch, the token went out at 6 ms.)
  EXPECT_EQ(sink_.Final()->ttft_us.value_or(-1), 5000);
  ASSERT_EQ(nodes_.decodes().size(), 1u);
  EXPECT_TRUE(nodes_.decodes()[0].request.pipelined());
  // Its first event read between the watch's polls; the other three relayed as they arrived.
  EXPECT_EQ(*nodes_.decodes()[0].relayed, 3);
  ASSERT_EQ(nodes_.watches().size(), 1u);
  EXPECT_EQ(nodes_.watches()[0].request.generation(), 7u);
  EXPECT_TRUE(nodes_.releases().empty());
}

TEST_F(DriverTest, PipelinedDecodeSilentPastRpcTimeoutPlusIdleIsReprefilled) {
  options_.pipelined_transfer = true;
  options_.max_attempts = 1;
  nodes_.on_watch = [](const std::string&, const v1::WatchKvRequest&) {
    return StreamScript<v1::KvProgress>{};  // ends at once: no head start
  };
  nodes_.on_decode = [](const std::string&, const v1::DecodeRequest& request) {
    return FakeDecode(request, absl::Seconds(20));  // first event after 20 s > 10 s + 2 s
  };
  const absl::Status status = Generate(Request(3));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("no first event within 12000 ms"), std::string::npos) << status;
  EXPECT_EQ(clock_.Now() - start_, absl::Seconds(12));
  EXPECT_EQ(nodes_.releases().size(), 1u);  // the prefill's KV, which nobody took
}

TEST_F(DriverTest, NChoicesShareOnePrefillAndOneDecodeCall) {
  ASSERT_TRUE(Generate(Request(3, /*n=*/2)).ok());
  EXPECT_EQ(sink_.Tokens(0), Seq(0, 3));
  EXPECT_EQ(sink_.Tokens(1), Seq(0, 3, 150));
  ASSERT_EQ(nodes_.prefills().size(), 1u);
  EXPECT_EQ(nodes_.prefills()[0].request.n(), 2);
  ASSERT_EQ(nodes_.decodes().size(), 1u);
  EXPECT_EQ(nodes_.decodes()[0].request.choices_size(), 2);
  ASSERT_EQ(sink_.ends.size(), 2u);
  for (const ChoiceEnded& end : sink_.ends) {
    EXPECT_EQ(end.finish_reason, "length");
    EXPECT_EQ(end.completion_tokens, 3);
  }
  EXPECT_EQ(sink_.Final()->completion_tokens, 6);
}

TEST_F(DriverTest, NChoicesResumeEachChoiceOnItsOwnAfterTheSharedDecodeFails) {
  int calls = 0;
  nodes_.on_decode = [&](const std::string&, const v1::DecodeRequest& request) {
    StreamScript<v1::DecodeEvent> script = FakeDecode(request);
    if (++calls == 1) {
      script.resize(2);  // g[1] of each choice, then the node dies
      script.push_back(EndAt<v1::DecodeEvent>(3 * kGap, absl::UnavailableError("gone")));
    }
    return script;
  };
  v1::GenerateRequest request = Request(4, /*n=*/2);
  request.mutable_sampling()->set_seed(40);
  ASSERT_TRUE(Generate(request).ok());
  // Each choice resumed from its own tokens; choice 1's fake tokens ignore the seed but its
  // resume prefill must carry seed + 1.
  EXPECT_EQ(sink_.Tokens(0), Seq(0, 4));
  const auto prefills = nodes_.prefills();
  ASSERT_EQ(prefills.size(), 3u);  // the joint one, then one resume per choice
  EXPECT_EQ(prefills[1].request.sampling().seed(), 40u);
  EXPECT_EQ(prefills[2].request.sampling().seed(), 41u);
  EXPECT_EQ(prefills[2].request.prompt_ids(3), 150);  // choice 1's g[0]
  EXPECT_EQ(nodes_.decodes().size(), 3u);
}

}  // namespace
}  // namespace tandem
