// KV digests checked while the pull runs (issue 28 item 4): with pull_chunk_bytes small, an
// unpipelined pull starts with one block range; the fake transport moves the bytes through this
// process, so the puller CRCs them as it copies (copy_crcs.h), the range is checked from those
// CRCs as it lands, and — no overlap being needed — the rest comes in one pull. A byte corrupted
// in flight is caught before any decode step reads the KV, and the retry gives the clean run's
// answer.
#include "tests/decode_node/decode_node_fixture.h"

namespace tandem::testing {
namespace {

TEST_F(DecodeNodeTest, DigestsAreCheckedRangeByRangeWhileThePullRuns) {
  pull_chunk_bytes_ = 1;  // one 16-token block per range: [0,16) [16,32) [32,40)
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 5);
  ASSERT_OK(out.started);
  EXPECT_TRUE(out.started->digests_verified);
  // Block 0 was checked (from its copy's CRCs) before blocks 1-2 were pulled, in one go.
  EXPECT_EQ(out.started->digest_ranges_overlapped, 1);
  EXPECT_GT(out.started->digest_fused_bytes, 0);
  EXPECT_LE(out.started->digest_fused_bytes, out.started->bytes);
  EXPECT_GE(out.started->digest_micros, 0);
  EXPECT_LE(out.started->digest_wait_micros,
            out.started->digest_micros + out.started->micros + 1000000);
  EXPECT_EQ(out.started->bytes, net_.bytes("p-fast"));
  EXPECT_OK(out.done);
  EXPECT_EQ(out.generated, 5);
  // tandem_kv_digest_check_seconds_total moved; a handle without digests (a prefill run with
  // --kv_digests=false) is trusted and leaves it where it was.
  const absl::Duration checked = node->kv_digest_check_time();
  EXPECT_GT(checked, absl::ZeroDuration());
  prefill_->set_send_digests(false);
  Outcome trusted = Decode(*node, prefill_->Lease(kFast, "r-off", 40), 2);
  ASSERT_OK(trusted.started);
  EXPECT_FALSE(trusted.started->digests_verified);
  EXPECT_OK(trusted.done);
  EXPECT_EQ(node->kv_digest_check_time(), checked);
  prefill_->set_send_digests(true);

  // The same prompt pulled in one piece (the default for small KV) decodes to the same tokens.
  pull_chunk_bytes_ = DecodeNodeOptions().pull_chunk_bytes;
  std::unique_ptr<DecodeNode> whole = NewNode();
  ASSERT_NE(whole, nullptr);
  Outcome one = Decode(*whole, prefill_->Lease(kFast, "r2", 40), 5);
  ASSERT_OK(one.started);
  EXPECT_EQ(one.started->digest_ranges_overlapped, 0);
  EXPECT_EQ(one.started->bytes, out.started->bytes);
  EXPECT_EQ(one.tokens, out.tokens);
  ExpectAllBlocksFree(*node);
  ExpectAllBlocksFree(*whole);
}

// A link that lands the bytes itself (UCX gets over TCP or RDMA): no CRCs come with the copy, so
// each landed range is read back on the check lane while the next is pulled, range by range to
// the end; a byte changed in the source before its range is read is caught the same way.
TEST_F(DecodeNodeTest, BytesALinkLandsItselfAreReadBackRangeByRangeOnTheLane) {
  pull_chunk_bytes_ = 1;  // one 16-token block per range: [0,16) [16,32) [32,40)
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.lands_bytes_itself = true});
  Outcome out = Decode(*node, prefill_->Lease(kFast, "r1", 40), 4);
  ASSERT_OK(out.started);
  EXPECT_TRUE(out.started->digests_verified);
  // Blocks 0 and 1 were checked on the lane while later ranges were pulled; block 2 after.
  EXPECT_EQ(out.started->digest_ranges_overlapped, 2);
  EXPECT_EQ(out.started->digest_fused_bytes, 0);
  ASSERT_OK(out.done);

  const KvHandle kv = prefill_->Lease(kFast, "r2", 40);
  const PoolGeometry g = RankPoolGeometry(kv.layout, 0);
  auto* pool = static_cast<std::byte*>(sources_[0]->pool(0).base());
  const int64_t at = KvByteOffset(g, kv.block_table[2], 1, 0, 0, 3);
  pool[at] ^= std::byte{0x01};
  Outcome bad = Decode(*node, kv, 4);
  EXPECT_THAT(bad.started,
              StatusIs(absl::StatusCode::kAborted, HasSubstr("digest mismatch in 1 of")));
  EXPECT_TRUE(bad.tokens.empty());
  pool[at] ^= std::byte{0x01};
  ExpectAllBlocksFree(*node);
}

TEST_F(DecodeNodeTest, ACorruptedRangeIsCaughtByTheOverlappedCheckAndTheRetryIsCorrect) {
  pull_chunk_bytes_ = 1;
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  Outcome clean = Decode(*node, prefill_->Lease(kFast, "clean", 40), 4);
  ASSERT_OK(clean.started);
  ASSERT_OK(clean.done);
  ASSERT_FALSE(clean.tokens.empty());

  const KvHandle kv = prefill_->Lease(kFast, "r1", 40);
  net_.SetFaults("p-fast", FakeFaults{.paused = true});
  Outcome out;
  std::thread decoding([&] { out = Decode(*node, kv, 4); });
  ASSERT_TRUE(WaitFor([&] { return net_.paused_waiters("p-fast") == 2; }));
  // The first range is waiting on the link; a byte of the second range's block changes before
  // it is read (what a bad link or pool would do to it in flight).
  const PoolGeometry g = RankPoolGeometry(kv.layout, 0);
  auto* pool = static_cast<std::byte*>(sources_[0]->pool(0).base());
  const int64_t at = KvByteOffset(g, kv.block_table[1], 1, 0, 0, 3);
  pool[at] ^= std::byte{0x01};
  net_.Resume("p-fast");
  decoding.join();
  EXPECT_THAT(out.started,
              StatusIs(absl::StatusCode::kAborted, AllOf(HasSubstr("prefill prefill-fast:1"),
                                                         HasSubstr("digest mismatch in 1 of"),
                                                         HasSubstr("destination rank(s) 1"))));
  EXPECT_TRUE(out.tokens.empty());  // no decode step read the KV
  EXPECT_EQ(node->kv_digest_mismatches(), 1);
  EXPECT_EQ(node->running(), 0);
  EXPECT_EQ(prefill_->leases(), 0);
  ExpectAllBlocksFree(*node);

  // The pool is whole again; the router's retry (a fresh lease) gives the clean run's answer.
  pool[at] ^= std::byte{0x01};
  Outcome retry = Decode(*node, prefill_->Lease(kFast, "r1", 40), 4);
  ASSERT_OK(retry.started);
  EXPECT_TRUE(retry.started->digests_verified);
  EXPECT_EQ(retry.started->digest_ranges_overlapped, 1);
  ASSERT_OK(retry.done);
  EXPECT_EQ(retry.tokens, clean.tokens);
  ExpectAllBlocksFree(*node);
}

}  // namespace
}  // namespace tandem::testing
