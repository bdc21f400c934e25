// DecodeNode with fakes on both sides (no processes, no UCX, no gRPC): a small synthetic model,
// FakeKvPullers on an in-process FakeKvNetwork and a FakePrefill whose leases behave like the
// prefill node's. Every case asserts the specific status, that the node's KV blocks all come
// back, and what happened to the prefill's lease.
#include "decode_node/decode_node.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "attention/pool_layout.h"
#include "engine/combined_engine.h"
#include "gtest/gtest.h"
#include "kv_transfer/fake/fake_kv_puller.h"
#include "kv_transfer/fake/fake_kv_source.h"
#include "model/format/model_loader.h"
#include "model/tools/synthetic_model.h"
#include "tests/decode_node/fake_prefill.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::tandem::fake::FakeFaults;
using ::tandem::fake::FakeKvNetwork;
using ::tandem::fake::FakeKvSource;
using ::tandem::fake::MetadataCorruption;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr char kFast[] = "prefill-fast:1";  // engine "p-fast"
constexpr char kSlow[] = "prefill-slow:1";  // engine "p-slow"
constexpr int32_t kBlocks = 16;             // per decode rank
constexpr int32_t kBlockSize = 16;
constexpr absl::Duration kLease = absl::Seconds(1);
constexpr absl::Duration kBound = absl::Seconds(20);  // every wait in these tests

bool WaitFor(const std::function<bool()>& condition, absl::Duration limit = kBound) {
  const absl::Time deadline = absl::Now() + limit;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// What one Start call did, and, when it started, how the decode ended.
struct Outcome {
  absl::StatusOr<TransferStats> started = absl::UnknownError("not run");
  absl::Status done = absl::UnknownError("not done");
  int32_t generated = 0;
};

class DecodeNodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_path_ = new std::string(
        absl::StrCat(::testing::TempDir(), "/decode_node_test_", getpid(), ".gguf"));
    ASSERT_OK(WriteSyntheticModel(SyntheticModelOptions{}, *model_path_));
  }
  static void TearDownTestSuite() {
    std::remove(model_path_->c_str());
    delete model_path_;
  }

  void SetUp() override {
    absl::StatusOr<LoadedModel> model = LoadModel(*model_path_);
    ASSERT_OK(model);
    vocab_ = model->weights.config.vocab_size;
    // Prefill layout tp 1 (both KV heads in one pool) → decode tp 2 (one head per rank).
    const KvLayout src{ParallelConfig{1, 1, 1, kBlockSize, kBlockSize},
                       DimsOf(model->weights.config), KvDType::kF32};
    for (const auto& [address, engine] : {std::pair{kFast, "p-fast"}, std::pair{kSlow, "p-slow"}}) {
      KvSourceOptions o;
      o.engine_id = engine;
      o.epoch = 5;
      o.compat_hash = CompatibilityHash(model->identity, src);
      o.layout = src;
      o.pool_bytes_per_rank = PoolBytes(RankPoolGeometry(src, 0), 32);
      absl::StatusOr<std::unique_ptr<FakeKvSource>> source = FakeKvSource::Create(&net_, o);
      ASSERT_OK(source);
      prefill_->AddInstance(address, source->get());
      sources_.push_back(std::move(*source));
    }
  }

  std::unique_ptr<DecodeNode> NewNode(absl::Duration queue_timeout = absl::Seconds(20),
                                      absl::Duration stall_timeout = absl::Seconds(20)) {
    DecodeNodeOptions o;
    o.model_path = *model_path_;
    o.advertised_address = "decode:1";
    o.instance.parallel = ParallelConfig{2, 1, 1, kBlockSize, kBlockSize};
    o.instance.threads_per_rank = 1;
    o.instance.kv_bytes_per_rank = 0;  // set below from the block size
    o.queue_timeout = queue_timeout;
    o.rpc_timeout = absl::Milliseconds(100);
    o.stall_timeout = stall_timeout;
    o.pullers = fake::FakePullerFactory(&net_);
    o.prefill = prefill_;
    absl::StatusOr<LoadedModel> model = LoadModel(*model_path_);
    EXPECT_OK(model);
    const KvLayout dst{o.instance.parallel, DimsOf(model->weights.config), KvDType::kF32};
    o.instance.kv_bytes_per_rank = PoolBytes(RankPoolGeometry(dst, 0), kBlocks);
    absl::StatusOr<std::unique_ptr<DecodeNode>> node = DecodeNode::Create(o);
    EXPECT_OK(node);
    if (!node.ok()) return nullptr;
    EXPECT_EQ((*node)->total_blocks(), kBlocks);
    return std::move(*node);
  }

  // Start, then (if it started) the end of the decode, bounded.
  Outcome Decode(
      DecodeNode& node, const KvHandle& kv, int32_t max_new_tokens,
      std::function<bool()> cancelled = [] { return false; }) {
    struct Done {
      absl::Notification notification;
      absl::Status status;
      int32_t generated = 0;
    };
    auto done = std::make_shared<Done>();
    DecodeCall call;
    call.request_id = kv.request_id;
    call.first_token = 7;
    call.kv = kv;
    call.max_new_tokens = max_new_tokens;
    DecodeSink sink;
    sink.on_token = [](int32_t) {};
    sink.on_done = [done](absl::Status s, FinishReason, int32_t generated) {
      done->status = std::move(s);
      done->generated = generated;
      done->notification.Notify();
    };
    Outcome out;
    out.started = node.Start(call, std::move(sink), cancelled);
    if (out.started.ok()) {
      EXPECT_TRUE(done->notification.WaitForNotificationWithTimeout(kBound));
      out.done = done->status;
      out.generated = done->generated;
    }
    return out;
  }

  // Every block back on the node (the engine frees a finished request's blocks on its thread).
  void ExpectAllBlocksFree(const DecodeNode& node) {
    EXPECT_TRUE(WaitFor([&] { return node.free_blocks() == kBlocks; }))
        << node.free_blocks() << " of " << kBlocks << " blocks free";
  }

  static std::string* model_path_;
  int32_t vocab_ = 0;
  FakeKvNetwork net_;
  std::shared_ptr<FakePrefill> prefill_ = std::make_shared<FakePrefill>(kLease);
  std::vector<std::unique_ptr<FakeKvSource>> sources_;  // [fast, slow]
};

std::string* DecodeNodeTest::model_path_ = nullptr;

TEST_F(DecodeNodeTest, RefusesToBeBuiltWithoutTransportOrPrefillClient) {
  DecodeNodeOptions o;
  o.model_path = *model_path_;
  o.prefill = prefill_;
  EXPECT_THAT(DecodeNode::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("puller factory")));
}

TEST_F(DecodeNodeTest, PullsReleasesTheLeaseAndDecodes) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 5);
  ASSERT_OK(out.started);
  EXPECT_TRUE(out.started->digests_verified);
  EXPECT_EQ(node->kv_digests_verified(), 1);
  EXPECT_EQ(node->kv_digest_mismatches(), 0);
  EXPECT_GT(out.started->bytes, 0);
  EXPECT_EQ(out.started->bytes, net_.bytes("p-fast"));
  EXPECT_OK(out.done);
  EXPECT_EQ(out.generated, 5);
  EXPECT_EQ(prefill_->releases_held(), 1);
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, RanksPullConcurrently) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.paused = true});
  Outcome out;
  std::thread t([&] { out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2); });
  // Both ranks are inside their pull at the same time: only possible if they run concurrently.
  EXPECT_TRUE(WaitFor([&] { return net_.paused_waiters("p-fast") == 2; }));
  net_.Resume("p-fast");
  t.join();
  EXPECT_EQ(net_.peak_active_pulls("p-fast"), 2);
  ASSERT_OK(out.started);
  EXPECT_OK(out.done);
  ExpectAllBlocksFree(*node);
}

// A pull that takes several lease lengths succeeds because the lease is renewed while it runs...
TEST_F(DecodeNodeTest, PullLongerThanTheLeaseSucceedsBecauseOfRenewal) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.copy_delay = absl::Milliseconds(800)});
  const absl::Time t0 = absl::Now();
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  ASSERT_OK(out.started);
  EXPECT_GT(absl::Now() - t0, 2 * kLease) << "the pull must outlast the lease for this test";
  EXPECT_GE(prefill_->renewals(), 2);
  EXPECT_EQ(prefill_->releases_held(), 1);
  ExpectAllBlocksFree(*node);
}

// ...and fails without it: renewals refused, the lease lapses mid-pull, the KV is discarded.
TEST_F(DecodeNodeTest, PullLongerThanTheLeaseFailsWithoutRenewal) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  prefill_->set_renew_fails(true);
  net_.SetFaults("p-fast", FakeFaults{.copy_delay = absl::Milliseconds(800)});
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kAborted,
                                    HasSubstr("expired before the transfer finished")));
  EXPECT_EQ(prefill_->renewals(), 0);
  EXPECT_EQ(prefill_->releases_held(), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, LeaseLostDuringPullStopsThePullWithAborted) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.paused = true});
  Outcome out;
  std::thread t([&] { out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2); });
  ASSERT_TRUE(WaitFor([&] { return net_.paused_waiters("p-fast") == 2; }));
  prefill_->ExpireAll();  // the prefill reaped the lease; the next renewal is refused
  t.join();               // never resumed: only the lost lease can end this pull early
  EXPECT_THAT(out.started,
              StatusIs(absl::StatusCode::kAborted, HasSubstr("expired during the transfer")));
  EXPECT_EQ(prefill_->releases_held(), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, StalledPullFailsWithinTheStallTimeoutAndReleasesTheLease) {
  std::unique_ptr<DecodeNode> node = NewNode(absl::Seconds(20), absl::Milliseconds(300));
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.stall_after_bytes = 0});
  const absl::Time t0 = absl::Now();
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("stalled")));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(prefill_->releases_held(), 1);
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
}

// Pipelined transfer: Start with an early handle follows the prefill's progress.
class PipelinedDecodeTest : public DecodeNodeTest {
 protected:
  struct Pipelined {
    Outcome out;
    std::vector<int32_t> tokens;
  };
  Pipelined Run(DecodeNode& node, const KvHandle& kv) {
    auto tokens = std::make_shared<std::vector<int32_t>>();
    auto done = std::make_shared<absl::Notification>();
    auto status = std::make_shared<absl::Status>();
    DecodeCall call;
    call.request_id = kv.request_id;
    call.first_token = -1;  // ignored
    call.pipelined = true;
    call.kv = kv;
    call.max_new_tokens = 3;
    DecodeSink sink;
    sink.on_token = [tokens](int32_t t) { tokens->push_back(t); };
    sink.on_done = [done, status](absl::Status s, FinishReason, int32_t) {
      *status = std::move(s);
      done->Notify();
    };
    Pipelined p;
    p.out.started = node.Start(call, std::move(sink), [] { return false; });
    if (p.out.started.ok()) {
      EXPECT_TRUE(done->WaitForNotificationWithTimeout(kBound));
      p.out.done = *status;
    }
    p.tokens = *tokens;
    return p;
  }
};

TEST_F(PipelinedDecodeTest, PullsEachRangeAsItIsReadyAndStreamsThePrefillsFirstToken) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  prefill_->ScriptWatch({KvProgressEvent{0, false, 0}, KvProgressEvent{13, false, 0},
                         KvProgressEvent{13, false, 0}, KvProgressEvent{29, false, 0},
                         KvProgressEvent{40, true, 9}});
  const Pipelined p = Run(*node, prefill_->Lease(kFast, "r1", 40));
  ASSERT_OK(p.out.started);
  EXPECT_OK(p.out.done);
  EXPECT_EQ(p.out.started->chunks, 3);  // [0,13) [13,29) [29,40)
  EXPECT_EQ(p.out.started->chunks_before_prefill_done, 2);
  EXPECT_GT(p.out.started->bytes, 0);
  ASSERT_EQ(p.tokens.size(), 3u);
  EXPECT_EQ(p.tokens[0], 9);  // the prefill's, before the decode's
  EXPECT_EQ(prefill_->watches(), 1);
  EXPECT_EQ(prefill_->releases_held(), 1);
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
}

// The final progress message carries the digests; they are checked over the whole prompt after
// the last range landed, before the first decode step. A byte that changed after the prefill
// computed them fails the transfer.
TEST_F(PipelinedDecodeTest, DigestsOfTheFinalProgressAreCheckedBeforeDecoding) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  prefill_->set_send_digests(false);  // an early handle has none
  const KvHandle kv = prefill_->Lease(kFast, "r1", 40);
  KvProgressEvent done{40, true, 9};
  done.kv_digests = prefill_->DigestsOf(kv);
  prefill_->ScriptWatch({KvProgressEvent{13, false, 0}, done});
  const Pipelined ok = Run(*node, kv);
  ASSERT_OK(ok.out.started);
  EXPECT_TRUE(ok.out.started->digests_verified);
  EXPECT_OK(ok.out.done);

  const KvHandle again = prefill_->Lease(kFast, "r2", 40);
  done.kv_digests = prefill_->DigestsOf(again);
  auto* pool = static_cast<std::byte*>(sources_[0]->pool(0).base());
  pool[KvByteOffset(RankPoolGeometry(again.layout, 0), again.block_table[2], 0, 1, 1, 7)] ^=
      std::byte{0x80};  // token 39 (block 2, slot 7): in the last range
  prefill_->ScriptWatch({KvProgressEvent{13, false, 0}, done});
  const Pipelined bad = Run(*node, again);
  EXPECT_THAT(bad.out.started,
              StatusIs(absl::StatusCode::kAborted, HasSubstr("digest mismatch in 1 of")));
  EXPECT_TRUE(bad.tokens.empty());  // not even the prefill's first token went out
  EXPECT_EQ(node->kv_digest_mismatches(), 1);
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(PipelinedDecodeTest, BrokenProgressStreamFailsWithItsErrorAndReleasesTheLease) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  prefill_->ScriptWatch(
      {KvProgressEvent{16, false, 0},
       absl::UnavailableError("KV progress stream from prefill prefill-fast:1: socket closed")});
  const Pipelined p = Run(*node, prefill_->Lease(kFast, "r1", 40));
  EXPECT_THAT(p.out.started, StatusIs(absl::StatusCode::kUnavailable,
                                      HasSubstr("KV progress stream from prefill prefill-fast:1")));
  EXPECT_TRUE(p.tokens.empty());
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(PipelinedDecodeTest, SilentPrefillFailsWithinTheStallTimeout) {
  std::unique_ptr<DecodeNode> node = NewNode(absl::Seconds(20), absl::Milliseconds(300));
  ASSERT_NE(node, nullptr);
  prefill_->ScriptWatch({KvProgressEvent{16, false, 0}});  // then nothing
  const absl::Time t0 = absl::Now();
  const Pipelined p = Run(*node, prefill_->Lease(kFast, "r1", 40));
  EXPECT_THAT(
      p.out.started,
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               HasSubstr("no KV progress from prefill prefill-fast:1 for 300ms (16 of 40")));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(PipelinedDecodeTest, ProgressBeyondThePromptIsInternal) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  prefill_->ScriptWatch({KvProgressEvent{41, false, 0}});
  const Pipelined p = Run(*node, prefill_->Lease(kFast, "r1", 40));
  EXPECT_THAT(p.out.started,
              StatusIs(absl::StatusCode::kInternal, HasSubstr("41 tokens ready of a 40-token")));
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
}

// Fault injection (issue 28): a byte of the prefill's pool changes while the pull is in flight
// (both ranks' first copies waiting on the paused link). The digests catch it before any decode
// step: the KV is discarded, the mismatch counted, the lease released, every block freed, and
// the error is ABORTED naming the prefill, so the router prefills again elsewhere.
TEST_F(DecodeNodeTest, ByteFlippedInThePrefillPoolMidPullIsCaughtAndDiscarded) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  const KvHandle kv = prefill_->Lease(kFast, "r1", 40);
  ASSERT_FALSE(kv.kv_digests.empty());
  net_.SetFaults("p-fast", FakeFaults{.paused = true});
  Outcome out;
  std::thread decoding([&] { out = Decode(*node, kv, 2); });
  ASSERT_TRUE(WaitFor([&] { return net_.paused_waiters("p-fast") == 2; }));
  // Token 3's K of layer 0, head 1 (tp 2: decode rank 1's head) in block kv.block_table[0].
  const PoolGeometry g = RankPoolGeometry(kv.layout, 0);
  auto* pool = static_cast<std::byte*>(sources_[0]->pool(0).base());
  pool[KvByteOffset(g, kv.block_table[0], 1, 0, 0, 3)] ^= std::byte{0x01};
  net_.Resume("p-fast");
  decoding.join();
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kAborted,
                                    AllOf(HasSubstr("prefill prefill-fast:1"),
                                          HasSubstr("digest mismatch in 1 of"), HasSubstr("head 1"),
                                          HasSubstr("destination rank(s) 1"))));
  EXPECT_EQ(node->kv_digest_mismatches(), 1);
  EXPECT_EQ(node->kv_digests_verified(), 0);
  EXPECT_EQ(prefill_->releases(), 1);
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
  EXPECT_EQ(node->running(), 0);

  // The retry (a fresh prefill: new digests over what the pool holds now) succeeds.
  Outcome retry = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  ASSERT_OK(retry.started);
  EXPECT_TRUE(retry.started->digests_verified);
  EXPECT_OK(retry.done);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, HandleWithoutDigestsIsPulledUnchecked) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  prefill_->set_send_digests(false);
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  ASSERT_OK(out.started);
  EXPECT_FALSE(out.started->digests_verified);
  EXPECT_EQ(node->kv_digests_verified(), 0);
  EXPECT_OK(out.done);
}

TEST_F(DecodeNodeTest, DigestListOfTheWrongSizeFailsTheTransfer) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  KvHandle kv = prefill_->Lease(kFast, "r1", 40);
  kv.kv_digests.pop_back();
  Outcome out = Decode(*node, kv, 2);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kAborted, HasSubstr("units")));
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, ShortTransferIsDataLoss) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.short_copy = 1});
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("completed")));
  EXPECT_EQ(prefill_->releases_held(), 1);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, SourceDyingPartWayIsUnavailable) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.die_after_bytes = 1});
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  // The ranks pull concurrently: the one that meets the death reports "died", a rank that
  // resolves its endpoint afterwards finds the source "dead"; either may be reported first.
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kUnavailable,
                                    AnyOf(HasSubstr("died"), HasSubstr("is dead"))));
  EXPECT_EQ(prefill_->releases(), 1);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, FailedCopyIsUnavailable) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.fail_copy = 0});
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
  EXPECT_EQ(prefill_->releases_held(), 1);
  ExpectAllBlocksFree(*node);
}

// Sampling penalties read the ids of the KV's tokens (DecodeCall.context_ids): without exactly
// kv.num_tokens of them the call is refused before anything is pulled; with them it decodes.
TEST_F(DecodeNodeTest, PenaltiesNeedTheKvTokenIdsAndAreRefusedBeforeAnyPullWithout) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  const KvHandle kv = prefill_->Lease(kFast, "r1", 40);
  DecodeCall call;
  call.request_id = kv.request_id;
  call.first_token = 7;
  call.kv = kv;
  call.max_new_tokens = 4;
  call.sampling.repetition_penalty = 1.3f;
  call.sampling.presence_penalty = 0.5f;
  call.context_ids.assign(static_cast<size_t>(kv.num_tokens) - 1, 5);
  auto done = std::make_shared<absl::Notification>();
  auto sink = [done] {
    DecodeSink s;
    s.on_token = [](int32_t) {};
    s.on_done = [done](absl::Status, FinishReason, int32_t) { done->Notify(); };
    return s;
  };
  EXPECT_THAT(node->Start(call, sink(), [] { return false; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("context_ids")));
  EXPECT_EQ(net_.bytes("p-fast"), 0);
  call.pipelined = true;
  call.sampling.logprobs = 1;
  call.context_ids.push_back(5);
  EXPECT_THAT(node->Start(call, sink(), [] { return false; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pipelined")));
  call.pipelined = false;
  ASSERT_OK(node->Start(call, sink(), [] { return false; }));
  EXPECT_TRUE(done->WaitForNotificationWithTimeout(kBound));
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, CorruptMetadataIsInvalidArgumentBeforeAnyBlockIsTaken) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  sources_[0]->CorruptMetadata(MetadataCorruption::kTruncatedRkey);
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  EXPECT_THAT(out.started,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rkey is truncated")));
  EXPECT_EQ(prefill_->releases_held(), 1);
  EXPECT_EQ(net_.bytes("p-fast"), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, MetadataNotMatchingThePublishedPoolIsRefusedByThePuller) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  sources_[0]->CorruptMetadata(MetadataCorruption::kWrongPoolBase);
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not what")));
  EXPECT_EQ(prefill_->releases_held(), 1);
  EXPECT_EQ(net_.bytes("p-fast"), 0);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, RestartedPrefillIsAborted) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  KvHandle kv = prefill_->Lease(kFast, "r1", 40);
  kv.epoch += 1;  // the handle names an epoch the instance no longer serves
  Outcome out = Decode(*node, kv, 2);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kAborted, HasSubstr("restarted")));
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, CancelWhilePullingIsCancelled) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.paused = true});
  std::atomic<bool> cancel{false};
  Outcome out;
  std::thread t([&] {
    out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2, [&] { return cancel.load(); });
  });
  ASSERT_TRUE(WaitFor([&] { return net_.paused_waiters("p-fast") == 2; }));
  cancel.store(true);
  t.join();
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled after")));
  EXPECT_EQ(net_.bytes("p-fast"), 0);
  EXPECT_EQ(prefill_->releases_held(), 1);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, CancelAfterThePullIsCancelled) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  // Cancelled from the moment the lease was released, i.e. after the whole pull.
  Outcome out =
      Decode(*node, prefill_->Lease(kFast, "r1", 40), 2, [&] { return prefill_->releases() > 0; });
  EXPECT_THAT(out.started,
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled by the client")));
  EXPECT_GT(net_.bytes("p-fast"), 0);
  EXPECT_EQ(prefill_->releases_held(), 1);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, ReleaseFailureAfterThePullIsUnavailable) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  prefill_->set_release_fails(true);
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  EXPECT_THAT(out.started,
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot confirm the KV lease")));
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, ReleaseFailureOnAnErrorPathKeepsTheOriginalError) {
  std::unique_ptr<DecodeNode> node = NewNode(absl::Seconds(20), absl::Milliseconds(200));
  ASSERT_NE(node, nullptr);
  prefill_->set_release_fails(true);
  net_.SetFaults("p-fast", FakeFaults{.stall_after_bytes = 0});
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("stalled")));
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, MoreBlocksThanTheInstanceHasIsResourceExhaustedAtOnce) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  // 260 + 8 positions need 17 blocks of 16; the instance has 16.
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 260), 8);
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("in total")));
  EXPECT_EQ(prefill_->releases_held(), 1);
  ExpectAllBlocksFree(*node);
}

// The capacity cases: a request from the slow prefill holds 14 of 16 blocks while its pull is
// paused; a 3-block request from the fast prefill has to wait.
class CapacityTest : public DecodeNodeTest {
 protected:
  void HoldCapacity(DecodeNode& node) {
    net_.SetFaults("p-slow", FakeFaults{.paused = true});
    holder_ = std::thread([&] { held_ = Decode(node, prefill_->Lease(kSlow, "big", 200), 16); });
    ASSERT_TRUE(WaitFor([&] { return net_.paused_waiters("p-slow") == 2; }));
    ASSERT_EQ(node.free_blocks(), 2);
  }
  void ReleaseCapacity() {
    net_.Resume("p-slow");
    holder_.join();
    ASSERT_OK(held_.started);
    EXPECT_OK(held_.done);
  }
  std::thread holder_;
  Outcome held_;
};

TEST_F(CapacityTest, WaitsForCapacityThenRuns) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  HoldCapacity(*node);
  Outcome out;
  std::thread waiter([&] { out = Decode(*node, prefill_->Lease(kFast, "small", 40), 8); });
  ASSERT_TRUE(WaitFor([&] { return node->queued() == 2; }));  // the holder and the waiter
  EXPECT_EQ(net_.copies("p-fast"), 0);
  ReleaseCapacity();
  waiter.join();
  ASSERT_OK(out.started);
  EXPECT_OK(out.done);
  EXPECT_EQ(prefill_->releases_held(), 2);
  ExpectAllBlocksFree(*node);
}

TEST_F(CapacityTest, CapacityWaitLongerThanTheLeaseKeepsTheLeaseAlive) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  HoldCapacity(*node);
  Outcome out;
  std::thread waiter([&] { out = Decode(*node, prefill_->Lease(kFast, "small", 40), 8); });
  // Wait well past the lease; the waiting request's lease must have been renewed.
  ASSERT_TRUE(WaitFor([&] { return prefill_->renewals() >= 4; }));
  ReleaseCapacity();
  waiter.join();
  ASSERT_OK(out.started);
  EXPECT_EQ(prefill_->releases_held(), 2);
  ExpectAllBlocksFree(*node);
}

TEST_F(CapacityTest, QueueTimeoutIsResourceExhausted) {
  std::unique_ptr<DecodeNode> node = NewNode(absl::Milliseconds(300));
  ASSERT_NE(node, nullptr);
  HoldCapacity(*node);
  Outcome out = Decode(*node, prefill_->Lease(kFast, "small", 40), 8);
  EXPECT_THAT(out.started,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("queue timeout")));
  EXPECT_EQ(prefill_->releases_held(), 1);
  ReleaseCapacity();
  ExpectAllBlocksFree(*node);
}

TEST_F(CapacityTest, CancelWhileWaitingForCapacityIsCancelled) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  HoldCapacity(*node);
  std::atomic<bool> cancel{false};
  Outcome out;
  std::thread waiter([&] {
    out = Decode(*node, prefill_->Lease(kFast, "small", 40), 8, [&] { return cancel.load(); });
  });
  ASSERT_TRUE(WaitFor([&] { return node->queued() == 2; }));
  cancel.store(true);
  waiter.join();
  EXPECT_THAT(out.started,
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("waiting for KV capacity")));
  EXPECT_EQ(prefill_->releases_held(), 1);
  EXPECT_EQ(node->free_blocks(), 2);  // the holder's blocks only
  ReleaseCapacity();
  ExpectAllBlocksFree(*node);
}

TEST_F(CapacityTest, LeaseLostWhileWaitingForCapacityIsAborted) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  HoldCapacity(*node);
  const KvHandle kv = prefill_->Lease(kFast, "small", 40);
  Outcome out;
  std::thread waiter([&] { out = Decode(*node, kv, 8); });
  ASSERT_TRUE(WaitFor([&] { return node->queued() == 2; }));
  prefill_->Revoke(kv);  // the prefill no longer holds it; the next renewal is refused
  waiter.join();
  EXPECT_THAT(out.started,
              StatusIs(absl::StatusCode::kAborted, HasSubstr("while waiting for capacity")));
  EXPECT_EQ(node->free_blocks(), 2);
  ReleaseCapacity();
  ExpectAllBlocksFree(*node);
}

// ---- Colocated prefill (decode_node/colocated_prefill.h) ----------------------------------------

// What a StartColocated call streamed and how it ended.
struct ColocatedOutcome {
  absl::Status started = absl::UnknownError("not run");
  std::vector<int32_t> tokens;
  absl::Status done = absl::UnknownError("not done");
  FinishReason reason = FinishReason::kError;
};

class ColocatedTest : public DecodeNodeTest {
 protected:
  std::unique_ptr<DecodeNode> NewColocatedNode(int64_t max_prefill_tokens = 2048) {
    DecodeNodeOptions o;
    o.model_path = *model_path_;
    o.advertised_address = "decode:1";
    o.instance.parallel = ParallelConfig{2, 1, 1, kBlockSize, kBlockSize};
    o.instance.threads_per_rank = 1;
    o.pullers = fake::FakePullerFactory(&net_);
    o.prefill = prefill_;
    o.colocated_prefill = true;
    o.colocated.max_prefill_tokens = max_prefill_tokens;
    absl::StatusOr<LoadedModel> model = LoadModel(*model_path_);
    EXPECT_OK(model);
    const KvLayout dst{o.instance.parallel, DimsOf(model->weights.config), KvDType::kF32};
    o.instance.kv_bytes_per_rank = PoolBytes(RankPoolGeometry(dst, 0), kBlocks);
    absl::StatusOr<std::unique_ptr<DecodeNode>> node = DecodeNode::Create(o);
    EXPECT_OK(node);
    return node.ok() ? std::move(*node) : nullptr;
  }

  // Greedy tokens of a single-rank CombinedEngine on the same model file (the reference).
  std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int32_t tokens) {
    absl::StatusOr<LoadedModel> model = LoadModel(*model_path_);
    EXPECT_OK(model);
    InstanceOptions io;
    io.parallel = ParallelConfig{1, 1, 1, kBlockSize, kBlockSize};
    io.threads_per_rank = 1;
    io.kv_bytes_per_rank = int64_t{8} << 20;
    absl::StatusOr<std::unique_ptr<Instance>> instance = Instance::Create(model->weights, io);
    EXPECT_OK(instance);
    if (!instance.ok()) return {};
    CombinedEngine engine(instance->get(), PrefillOptions{}, DecodeOptions{});
    GenerateRequest req;
    req.id = "reference";
    req.prompt = prompt;
    req.max_new_tokens = tokens;
    absl::StatusOr<GenerateResult> r = engine.GenerateBlocking(req, kBound);
    EXPECT_OK(r);
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  }

  ColocatedOutcome Run(DecodeNode& node, ColocatedCall call, bool cancel_at_once = false) {
    struct Done {
      absl::Mutex mu;
      std::vector<int32_t> tokens;
      absl::Notification notification;
      absl::Status status;
      FinishReason reason = FinishReason::kError;
    };
    auto done = std::make_shared<Done>();
    DecodeSink sink;
    sink.on_token = [done](int32_t t) {
      absl::MutexLock lock(&done->mu);
      done->tokens.push_back(t);
    };
    sink.on_done = [done](absl::Status s, FinishReason reason, int32_t) {
      done->status = std::move(s);
      done->reason = reason;
      done->notification.Notify();
    };
    const std::string id = call.request_id;
    ColocatedOutcome out;
    out.started = node.StartColocated(std::move(call), std::move(sink));
    if (!out.started.ok()) return out;
    if (cancel_at_once) node.Cancel(id);
    EXPECT_TRUE(done->notification.WaitForNotificationWithTimeout(kBound));
    absl::MutexLock lock(&done->mu);
    out.tokens = done->tokens;
    out.done = done->status;
    out.reason = done->reason;
    return out;
  }

  static ColocatedCall Call(std::string id, std::vector<int32_t> prompt, int32_t max_new_tokens) {
    ColocatedCall c;
    c.request_id = std::move(id);
    c.prompt = std::move(prompt);
    c.max_new_tokens = max_new_tokens;
    c.next_step = 1;
    return c;
  }
};

std::vector<int32_t> Prompt(int n, int32_t salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (i * 31 + salt * 17) % 200);
  return p;
}

TEST_F(ColocatedTest, PrefillsAndDecodesLikeTheCombinedEngineAndResumes) {
  std::unique_ptr<DecodeNode> node = NewColocatedNode(/*max_prefill_tokens=*/16);  // chunked
  ASSERT_NE(node, nullptr);
  const std::vector<int32_t> prompt = Prompt(45, 1);
  const std::vector<int32_t> reference = Reference(prompt, 10);
  ASSERT_EQ(reference.size(), 10u);
  ColocatedOutcome out = Run(*node, Call("c1", prompt, 10));
  ASSERT_OK(out.started);
  EXPECT_OK(out.done);
  EXPECT_EQ(out.reason, FinishReason::kLength);
  EXPECT_EQ(out.tokens, reference);
  // A resume after 4 streamed tokens: prompt + g[0..3) prefilled, g[3] given, g[4..] decoded.
  ColocatedCall resume = Call("c1/1", prompt, 10 - 3);
  resume.prompt.insert(resume.prompt.end(), reference.begin(), reference.begin() + 3);
  resume.resume_token = reference[3];
  resume.next_step = 4;
  out = Run(*node, resume);
  ASSERT_OK(out.started);
  EXPECT_OK(out.done);
  EXPECT_EQ(out.tokens, std::vector<int32_t>(reference.begin() + 3, reference.end()));
  // The given token is streamed and decoded from even when greedy sampling would differ.
  resume.request_id = "c1/2";
  resume.resume_token = reference[3] == 9 ? 10 : 9;
  out = Run(*node, resume);
  ASSERT_OK(out.started);
  EXPECT_OK(out.done);
  ASSERT_EQ(out.tokens.size(), 7u);
  EXPECT_EQ(out.tokens[0], *resume.resume_token);
  // max_new_tokens 1: the prefill's token, then the end.
  out = Run(*node, Call("c2", prompt, 1));
  ASSERT_OK(out.started);
  EXPECT_OK(out.done);
  EXPECT_EQ(out.tokens, std::vector<int32_t>{reference[0]});
  ExpectAllBlocksFree(*node);
  EXPECT_EQ(node->block_free_errors(), 0);
  EXPECT_EQ(prefill_->leases(), 0);  // no prefill node was involved
}

TEST_F(ColocatedTest, CancelDuringPrefillEndsCancelledAndFreesEveryBlock) {
  std::unique_ptr<DecodeNode> node = NewColocatedNode(/*max_prefill_tokens=*/4);
  ASSERT_NE(node, nullptr);
  // 200 prompt tokens in 50 chunks + 40 positions = 15 of the 16 blocks.
  const ColocatedOutcome out = Run(*node, Call("c", Prompt(200, 2), 40), /*cancel_at_once=*/true);
  ASSERT_OK(out.started);
  EXPECT_EQ(out.done.code(), absl::StatusCode::kCancelled) << out.done;
  EXPECT_LT(out.tokens.size(), 40u);
  ExpectAllBlocksFree(*node);
  EXPECT_EQ(node->block_free_errors(), 0);
  EXPECT_EQ(node->queued(), 0);
}

TEST_F(ColocatedTest, RefusesWhatCanNeverRunAndWithoutTheOptionRefusesEverything) {
  std::unique_ptr<DecodeNode> node = NewColocatedNode();
  ASSERT_NE(node, nullptr);
  EXPECT_THAT(Run(*node, Call("empty", {}, 4)).started,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(Run(*node, Call("id", {5, 1 << 20}, 4)).started,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1048576")));
  EXPECT_THAT(Run(*node, Call("budget", {5}, 0)).started,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_new_tokens")));
  ColocatedCall step0 = Call("step0", {5}, 4);
  step0.next_step = 0;
  EXPECT_THAT(Run(*node, step0).started,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("next_step")));
  // 250 + 40 positions need 19 blocks; the pool has 16.
  EXPECT_THAT(Run(*node, Call("big", Prompt(250, 3), 40)).started,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("16")));
  ExpectAllBlocksFree(*node);

  std::unique_ptr<DecodeNode> plain = NewNode();
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(plain->colocated_prefill());
  EXPECT_THAT(Run(*plain, Call("p", {5, 6}, 4)).started,
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--colocated_prefill")));
}

}  // namespace
}  // namespace tandem::testing
