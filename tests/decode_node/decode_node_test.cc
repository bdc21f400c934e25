// DecodeNode with fakes on both sides (no processes, no UCX, no gRPC): a small synthetic model,
// FakeKvPullers on an in-process FakeKvNetwork and a FakePrefill whose leases behave like the
// prefill node's. Every case asserts the specific status, that the node's KV blocks all come
// back, and what happened to the prefill's lease.
#include "tests/decode_node/decode_node_fixture.h"

namespace tandem::testing {
namespace {

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
  Pipelined Run(DecodeNode& node, const KvHandle& kv, const CancellationToken* cancel = nullptr) {
    const CancellationToken never;
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
    p.out.started = node.Start(call, std::move(sink), cancel != nullptr ? *cancel : never);
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

// logprobs stay pipelined: the final progress message carries the first token's, and they reach
// the sink just before that token. A prefill that does not send them fails the call (before any
// token) instead of streaming a first token without them.
TEST_F(PipelinedDecodeTest, FirstTokensLogprobsComeWithTheFinalProgress) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  const TokenLogprobs first{-0.25f, {{9, -0.25f}, {4, -1.5f}}};
  KvProgressEvent done{40, true, 9};
  done.first_logprobs = first;
  prefill_->ScriptWatch({KvProgressEvent{13, false, 0}, done});
  const KvHandle kv = prefill_->Lease(kFast, "r1", 40);
  auto events = std::make_shared<std::vector<std::string>>();
  auto got = std::make_shared<std::vector<TokenLogprobs>>();
  auto finished = std::make_shared<absl::Notification>();
  DecodeCall call;
  call.request_id = kv.request_id;
  call.first_token = -1;
  call.pipelined = true;
  call.kv = kv;
  call.max_new_tokens = 3;
  call.sampling.logprobs = 1;
  auto make_sink = [&] {
    DecodeSink sink;
    sink.on_token = [events](int32_t t) { events->push_back(absl::StrCat("token ", t)); };
    sink.on_logprobs = [events, got](const TokenLogprobs& l) {
      events->push_back("logprobs");
      got->push_back(l);
    };
    sink.on_done = [finished](absl::Status, FinishReason, int32_t) { finished->Notify(); };
    return sink;
  };
  ASSERT_OK(node->Start(call, make_sink(), CancellationToken()));
  ASSERT_TRUE(finished->WaitForNotificationWithTimeout(kBound));
  ASSERT_EQ(events->size(), 6u);
  EXPECT_EQ((*events)[0], "logprobs");
  EXPECT_EQ((*events)[1], "token 9");
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0], first);
  EXPECT_EQ((*got)[1].top.size(), 1u);  // the decode engine's own, one top entry as asked
  ExpectAllBlocksFree(*node);

  events->clear();
  done.first_logprobs.reset();
  prefill_->ScriptWatch({done});
  call.kv = prefill_->Lease(kFast, "r2", 40);
  call.request_id = call.kv.request_id;
  EXPECT_THAT(node->Start(call, make_sink(), CancellationToken()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("sent no log-probabilities with its first token")));
  EXPECT_TRUE(events->empty());
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
  // tandem_kv_digest_check_seconds_total moved; a pipelined prefill without digests (its pull
  // still asks for the copy's CRCs, not knowing) leaves it where it was.
  const absl::Duration checked = node->kv_digest_check_time();
  EXPECT_GT(checked, absl::ZeroDuration());
  const KvHandle off = prefill_->Lease(kFast, "r-off", 40);
  prefill_->ScriptWatch({KvProgressEvent{13, false, 0}, KvProgressEvent{40, true, 9}});
  const Pipelined trusted = Run(*node, off);
  ASSERT_OK(trusted.out.started);
  EXPECT_FALSE(trusted.out.started->digests_verified);
  EXPECT_OK(trusted.out.done);
  EXPECT_EQ(node->kv_digest_check_time(), checked);

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

// The wait for progress ends at the cancel itself, not at the stall timeout (a minute here).
TEST_F(PipelinedDecodeTest, CancelWhileThePrefillIsSilentEndsTheWaitAtOnce) {
  std::unique_ptr<DecodeNode> node = NewNode(absl::Seconds(20), absl::Seconds(60));
  ASSERT_NE(node, nullptr);
  prefill_->ScriptWatch({KvProgressEvent{16, false, 0}});  // then nothing
  CancellationToken cancel;
  Pipelined p;
  std::thread t([&] { p = Run(*node, prefill_->Lease(kFast, "r1", 40), &cancel); });
  // The first range landed and the node waits for more progress.
  ASSERT_TRUE(WaitFor([&] { return prefill_->silent_waits() > 0; }));
  EXPECT_GT(net_.bytes("p-fast"), 0);
  const absl::Time t0 = absl::Now();
  cancel.Cancel();
  t.join();
  EXPECT_THAT(p.out.started, StatusIs(absl::StatusCode::kCancelled,
                                      HasSubstr("cancelled while pulling a pipelined KV")));
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
  EXPECT_THAT(node->Start(call, sink(), CancellationToken()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("context_ids")));
  EXPECT_EQ(net_.bytes("p-fast"), 0);
  call.context_ids.push_back(5);
  ASSERT_OK(node->Start(call, sink(), CancellationToken()));
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
  CancellationToken cancel;
  Outcome out;
  std::thread t([&] { out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2, &cancel); });
  ASSERT_TRUE(WaitFor([&] { return net_.paused_waiters("p-fast") == 2; }));
  cancel.Cancel();
  t.join();
  EXPECT_THAT(out.started, StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled after")));
  EXPECT_EQ(net_.bytes("p-fast"), 0);
  EXPECT_EQ(prefill_->releases_held(), 1);
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, CancelAfterThePullIsCancelled) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  // Cancelled as the lease is released, i.e. after the whole pull.
  CancellationToken cancel;
  prefill_->set_after_release([&cancel] { cancel.Cancel(); });
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 2, &cancel);
  prefill_->set_after_release(nullptr);
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
  CancellationToken cancel;
  Outcome out;
  std::thread waiter([&] { out = Decode(*node, prefill_->Lease(kFast, "small", 40), 8, &cancel); });
  ASSERT_TRUE(WaitFor([&] { return node->queued() == 2; }));
  cancel.Cancel();
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

}  // namespace
}  // namespace tandem::testing
