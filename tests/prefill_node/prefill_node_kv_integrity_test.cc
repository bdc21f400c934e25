// PrefillNode, Provable KV (issue 28): every pull here is checked against the prefill's KV
// digests, computed chunk by chunk as the engine writes the KV; a byte flipped in the prefill's
// pool, a block corrupted while cached, or a block freed and reused under a live handle (a lease
// bookkeeping bug) fails the transfer — and the retry decodes the right tokens. Fixture:
// prefill_node_fixture.h (same binary as prefill_node_test.cc).
#include "prefill_node/prefill_node.h"
#include "tests/prefill_node/prefill_node_fixture.h"

namespace tandem::testing {
namespace {

TEST_F(PrefillNodeTest, ByteFlippedInThePoolFailsTheTransferAndTheRetryDecodesTheRightTokens) {
  std::unique_ptr<PrefillNode> prefill = NewNode(absl::Seconds(30), /*prefix_cache=*/false);
  ASSERT_NE(prefill, nullptr);
  auto client = std::make_shared<InProcessPrefill>(prefill.get());
  std::unique_ptr<DecodeNode> decode = NewDecode(client, 1);
  ASSERT_NE(decode, nullptr);
  const int32_t free_before = decode->free_blocks();
  absl::StatusOr<PrefillOutcome> clean = Prefill(*prefill, "r0");
  ASSERT_OK(clean);
  const std::vector<int32_t> expected = Decode(*prefill, *decode, "r0", *clean, 6);
  ASSERT_EQ(expected.size(), 6u);

  absl::StatusOr<PrefillOutcome> out = Prefill(*prefill, "r1");
  ASSERT_OK(out);
  // Rank 1's head (tp 2), layer 1, V, token 20 (block 1, slot 4): a prompt byte.
  const PoolGeometry g = RankPoolGeometry(prefill->layout(), 1);
  auto* pool = static_cast<std::byte*>(prefill->TestOnlyPool(1).base());
  pool[KvByteOffset(g, out->block_table[1], 0, 1, 1, 4) + 2] ^= std::byte{0x04};
  absl::StatusOr<TransferStats> started;
  EXPECT_TRUE(Decode(*prefill, *decode, "r1", *out, 6, &started).empty());
  EXPECT_THAT(started,
              StatusIs(absl::StatusCode::kAborted,
                       AllOf(HasSubstr("prefill prefill:1"), HasSubstr("source rank 1 block"))));
  EXPECT_EQ(decode->kv_digest_mismatches(), 1);
  EXPECT_EQ(prefill->Load().leases, 0);  // the failed transfer released the lease
  EXPECT_TRUE(WaitFor([&] { return decode->free_blocks() == free_before; }));

  // The router's retry: a new prefill (its KV rewritten, new digests) decodes the right tokens.
  absl::StatusOr<PrefillOutcome> retry = Prefill(*prefill, "r1");
  ASSERT_OK(retry);
  EXPECT_EQ(Decode(*prefill, *decode, "r1", *retry, 6), expected);
  EXPECT_EQ(prefill->Load().free_blocks, prefill->Load().total_blocks);
  EXPECT_EQ(prefill->Load().block_free_errors, 0);
}

// Issue 28: the prefill's digests are computed as the engine writes each chunk's KV (the
// on_kv_written hook), not in a pass after the prompt. Chunks of 16 tokens over a 37-token prompt
// (blocks of 16): its two full blocks are checked as written, the digests equal a one-pass
// computation over the pools; and a byte changed in block 0 after its chunk was checked — and
// published, pipelined — is caught by the decode node's check (the digests carry what was
// written, not what the pool holds at the end).
TEST_F(PrefillNodeTest, DigestsAreComputedChunkByChunkAsTheEngineWritesTheKv) {
  PrefillNodeOptions po;
  po.model_path = *model_path_;
  po.advertised_address = "prefill:1";
  po.instance.parallel = ParallelConfig{2, 1, 1, 16, 16};
  po.instance.threads_per_rank = 1;
  po.instance.kv_bytes_per_rank = 1 << 20;
  po.prefix_cache = false;
  po.prefill.max_prefill_tokens = 16;
  po.engine_id = absl::StrCat("p", next_engine_++);
  po.sources = fake::FakeSourceFactory(&net_);
  absl::StatusOr<std::unique_ptr<PrefillNode>> created = PrefillNode::Create(po);
  ASSERT_OK(created);
  PrefillNode& prefill = **created;
  auto client = std::make_shared<InProcessPrefill>(&prefill);
  std::unique_ptr<DecodeNode> decode = NewDecode(client, 1);
  ASSERT_NE(decode, nullptr);

  EXPECT_EQ(prefill.kv_digest_compute_time(), absl::ZeroDuration());
  absl::StatusOr<PrefillOutcome> out = Prefill(prefill, "r0");
  ASSERT_OK(out);
  EXPECT_EQ(prefill.kv_blocks_checked_as_written(), 2);
  // tandem_kv_digest_compute_seconds_total: the chunks' checks and the final pass took time.
  EXPECT_GT(prefill.kv_digest_compute_time(), absl::ZeroDuration());
  std::vector<absl::Span<const std::byte>> pools;
  for (int32_t r = 0; r < 2; ++r) {
    const KvPoolMemory& p = prefill.TestOnlyPool(r);
    pools.emplace_back(static_cast<const std::byte*>(p.base()), static_cast<size_t>(p.bytes()));
  }
  absl::StatusOr<std::vector<uint32_t>> one_pass = ComputeKvDigests(
      prefill.layout(), pools, out->num_tokens,
      KvDigestBinding{"r0", out->generation, out->block_table, out->block_generations});
  ASSERT_OK(one_pass);
  EXPECT_EQ(out->kv_digests, *one_pass);
  EXPECT_EQ(decode->kv_digest_check_time(), absl::ZeroDuration());
  const std::vector<int32_t> expected = Decode(prefill, *decode, "r0", *out, 4);
  ASSERT_EQ(expected.size(), 4u);
  // tandem_kv_digest_check_seconds_total
  EXPECT_GT(decode->kv_digest_check_time(), absl::ZeroDuration());

  // Pipelined: once the first chunk is published its block's checks exist; a byte of it
  // changes after that (once the prefill is final: until then its later chunks' attention reads
  // that block, and flipping it under them would be a data race, which TSan reports).
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 37; ++i) prompt.push_back(10 + (i * 7) % 250);
  absl::StatusOr<PrefillOutcome> early =
      prefill.StartPipelined(TestCall("r1", prompt, 8), CancellationToken());
  ASSERT_OK(early);
  absl::StatusOr<std::shared_ptr<const KvProgress>> progress =
      prefill.WatchKv("r1", early->generation);
  ASSERT_OK(progress);
  KvProgressSnapshot seen{.tokens_ready = -1};
  while (seen.tokens_ready < 16 && !seen.final()) seen = (*progress)->Await(seen, kBound);
  ASSERT_TRUE(seen.status.ok()) << seen.status;
  const PoolGeometry g = RankPoolGeometry(prefill.layout(), 0);
  auto* pool = static_cast<std::byte*>(prefill.TestOnlyPool(0).base());
  while (!seen.final()) seen = (*progress)->Await(seen, kBound);
  ASSERT_TRUE(seen.done) << seen.status;
  pool[KvByteOffset(g, early->block_table[0], 0, 0, 0, 3)] ^= std::byte{0x08};
  EXPECT_EQ(prefill.kv_blocks_checked_as_written(), 4);

  DecodeCall call;
  call.request_id = "r1";
  call.first_token = -1;
  call.pipelined = true;
  call.kv.engine_id = prefill.engine_id();
  call.kv.epoch = prefill.epoch();
  call.kv.request_id = "r1";
  call.kv.block_table = early->block_table;
  call.kv.num_tokens = early->num_tokens;
  call.kv.layout = prefill.layout();
  call.kv.lease_expiry = early->lease_expiry;
  call.kv.generation = early->generation;
  call.kv.prefill_address = "prefill:1";
  call.kv.block_generations = early->block_generations;
  call.max_new_tokens = 4;
  DecodeSink sink;
  sink.on_token = [](int32_t) {};
  sink.on_done = [](absl::Status, FinishReason, int32_t) {};
  EXPECT_THAT(decode->Start(call, std::move(sink), CancellationToken()),
              StatusIs(absl::StatusCode::kAborted,
                       AllOf(HasSubstr("digest mismatch in 1 of"), HasSubstr("source rank 0"))));
  EXPECT_EQ(decode->kv_digest_mismatches(), 1);
  EXPECT_EQ(prefill.Load().leases, 0);
}

// With --kv_digests=false neither side spends time on digests: the metrics of their cost
// (tandem_kv_digest_compute_seconds_total, tandem_kv_digest_check_seconds_total) stay at 0
// through a prefill and its transfer (the pipelined decode side: decode_node_test).
TEST_F(PrefillNodeTest, WithDigestsOffNoDigestTimeIsCounted) {
  std::unique_ptr<PrefillNode> prefill =
      NewNode(absl::Seconds(30), /*prefix_cache=*/false, ParallelConfig{2, 1, 1, 16, 16}, 1 << 20,
              /*kv_digests=*/false);
  ASSERT_NE(prefill, nullptr);
  auto client = std::make_shared<InProcessPrefill>(prefill.get());
  std::unique_ptr<DecodeNode> decode = NewDecode(client, 1);
  ASSERT_NE(decode, nullptr);
  absl::StatusOr<PrefillOutcome> out = Prefill(*prefill, "r0");
  ASSERT_OK(out);
  EXPECT_TRUE(out->kv_digests.empty());
  EXPECT_EQ(Decode(*prefill, *decode, "r0", *out, 3).size(), 3u);
  EXPECT_EQ(prefill->kv_digest_compute_time(), absl::ZeroDuration());
  EXPECT_EQ(decode->kv_digest_check_time(), absl::ZeroDuration());
}

// Issue 28: a prefix-cache block corrupted while cached. The hit re-reads the block against
// the checks of its first write, drops it and computes its tokens again: the tokens and the
// digests stay right (a cache that digested the bytes as-is would hand the corruption on as
// valid KV). An undisturbed hit is bound from the recorded checks and verifies too.
TEST_F(PrefillNodeTest, ABlockCorruptedWhileCachedIsComputedAgainNotServed) {
  std::unique_ptr<PrefillNode> prefill = NewNode(absl::Seconds(30), /*prefix_cache=*/true);
  ASSERT_NE(prefill, nullptr);
  auto client = std::make_shared<InProcessPrefill>(prefill.get());
  std::unique_ptr<DecodeNode> decode = NewDecode(client, 1);
  ASSERT_NE(decode, nullptr);
  absl::StatusOr<PrefillOutcome> cold = Prefill(*prefill, "r0");
  ASSERT_OK(cold);
  EXPECT_EQ(cold->cached_tokens, 0);
  const std::vector<int32_t> expected = Decode(*prefill, *decode, "r0", *cold, 6);
  ASSERT_EQ(expected.size(), 6u);

  absl::StatusOr<PrefillOutcome> hit = Prefill(*prefill, "r1");
  ASSERT_OK(hit);
  EXPECT_EQ(hit->cached_tokens, 32);  // both full blocks of the 37-token prompt
  EXPECT_EQ(Decode(*prefill, *decode, "r1", *hit, 6), expected);

  // Rank 1's head, layer 1, V, slot 4 of the second cached block.
  const PoolGeometry g = RankPoolGeometry(prefill->layout(), 1);
  auto* pool = static_cast<std::byte*>(prefill->TestOnlyPool(1).base());
  pool[KvByteOffset(g, cold->block_table[1], 0, 1, 1, 4) + 2] ^= std::byte{0x04};
  absl::StatusOr<PrefillOutcome> after = Prefill(*prefill, "r2");
  ASSERT_OK(after);
  EXPECT_EQ(after->cached_tokens, 16);  // the first block only
  EXPECT_EQ(prefill->Load().prefix_corrupt_blocks, 1);
  EXPECT_EQ(Decode(*prefill, *decode, "r2", *after, 6), expected);
  EXPECT_EQ(decode->kv_digest_mismatches(), 0);

  // Cached afresh by r2: the whole prefix hits again.
  absl::StatusOr<PrefillOutcome> again = Prefill(*prefill, "r3");
  ASSERT_OK(again);
  EXPECT_EQ(again->cached_tokens, 32);
  EXPECT_EQ(Decode(*prefill, *decode, "r3", *again, 6), expected);
  EXPECT_EQ(prefill->Load().prefix_corrupt_blocks, 1);
  EXPECT_TRUE(WaitFor([&] { return prefill->Load().leases == 0; }));
  EXPECT_EQ(prefill->Load().free_blocks, prefill->Load().total_blocks);
  EXPECT_EQ(prefill->Load().block_free_errors, 0);
}

// Generation fencing (issue 28): r1's blocks are freed while its lease is still held (a lease
// bookkeeping bug, injected) and r2's prompt is prefilled into them. Pulling r1's handle then
// fails — by its digests, and with digests off by the generation check at ReleaseKv — never
// decoding r2's KV as r1's; the freed blocks are not freed twice, and the retry is right.
TEST_F(PrefillNodeTest, BlockFreedAndReusedUnderALiveHandleFailsTheTransferNotTheTokens) {
  for (const bool digests : {true, false}) {
    SCOPED_TRACE(digests ? "digests on" : "digests off: generation fencing alone");
    std::unique_ptr<PrefillNode> prefill =
        NewNode(absl::Seconds(30), /*prefix_cache=*/false, ParallelConfig{2, 1, 1, 16, 16}, 1 << 20,
                digests);
    ASSERT_NE(prefill, nullptr);
    auto client = std::make_shared<InProcessPrefill>(prefill.get());
    std::unique_ptr<DecodeNode> decode = NewDecode(client, 1);
    ASSERT_NE(decode, nullptr);
    absl::StatusOr<PrefillOutcome> clean = Prefill(*prefill, "r0");
    ASSERT_OK(clean);
    const std::vector<int32_t> expected = Decode(*prefill, *decode, "r0", *clean, 6);
    ASSERT_EQ(expected.size(), 6u);

    absl::StatusOr<PrefillOutcome> r1 = Prefill(*prefill, "r1");
    ASSERT_OK(r1);
    EXPECT_EQ(r1->kv_digests.empty(), !digests);
    ASSERT_TRUE(prefill->TestOnlyFreeLeasedBlocks(r1->generation));
    std::vector<int32_t> other;
    for (int32_t i = 0; i < 37; ++i) other.push_back(200 - (i * 5) % 150);
    absl::StatusOr<PrefillOutcome> r2 =
        prefill->Prefill(TestCall("r2", other, 8), CancellationToken());
    ASSERT_OK(r2);
    ASSERT_EQ(r2->block_table, r1->block_table);  // reused: lowest free ids first

    absl::StatusOr<TransferStats> started;
    EXPECT_TRUE(Decode(*prefill, *decode, "r1", *r1, 6, &started).empty());
    EXPECT_THAT(started,
                StatusIs(absl::StatusCode::kAborted,
                         HasSubstr(digests ? "failed its digests" : "lease expired before")));
    EXPECT_EQ(decode->kv_digest_mismatches(), digests ? 1 : 0);
    EXPECT_EQ(prefill->Load().leases, 1);  // r2's; r1's was released (as not held)

    // r2's blocks were not freed by r1's release: r2 still decodes, and frees them once.
    const std::vector<int32_t> r2_tokens = Decode(*prefill, *decode, "r2", *r2, 3);
    EXPECT_EQ(r2_tokens.size(), 3u);
    absl::StatusOr<PrefillOutcome> retry = Prefill(*prefill, "r1");
    ASSERT_OK(retry);
    EXPECT_EQ(Decode(*prefill, *decode, "r1", *retry, 6), expected);
    EXPECT_EQ(prefill->Load().free_blocks, prefill->Load().total_blocks);
    EXPECT_EQ(prefill->Load().block_free_errors, 0);
  }
}

}  // namespace
}  // namespace tandem::testing
