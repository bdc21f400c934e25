// n > 1 from one prefill on the decode node (DecodeNode::StartChoices, engine/choice_blocks.h):
// the KV is pulled once, the choices share the prompt's full blocks and each gets its own copy of
// the partial last one — so every choice decodes exactly what a one-sequence call with its first
// token and seed does — and however the call ends (finished, cancelled, a failed pull) the pool's
// free count returns to where it started.
#include <map>
#include <memory>
#include <vector>

#include "tests/decode_node/decode_node_fixture.h"

namespace tandem::testing {
namespace {

using ChoicesTest = DecodeNodeTest;

struct ChoiceRun {
  absl::StatusOr<TransferStats> started = absl::UnknownError("not run");
  std::map<int32_t, absl::Status> done;  // by choice index
  std::map<int32_t, std::vector<int32_t>> tokens;
};

// StartChoices with `firsts[i]` as choice i's first token; waits (bounded) for every choice.
ChoiceRun DecodeChoices(DecodeNode& node, const KvHandle& kv, int32_t max_new_tokens,
                        const std::vector<int32_t>& firsts, const SamplingParams& sampling = {},
                        std::function<void(DecodeNode&)> after_start = nullptr) {
  struct Shared {
    absl::Mutex mu;
    int32_t left = 0;
    ChoiceRun run;
  };
  auto shared = std::make_shared<Shared>();
  shared->left = static_cast<int32_t>(firsts.size());
  DecodeCall call;
  call.request_id = kv.request_id;
  call.first_token = firsts[0];
  call.kv = kv;
  call.sampling = sampling;
  call.max_new_tokens = max_new_tokens;
  std::vector<DecodeSink> sinks;
  for (int32_t i = 0; i < static_cast<int32_t>(firsts.size()); ++i) {
    call.choices.push_back(DecodeChoice{i, firsts[i]});
    DecodeSink& sink = sinks.emplace_back();
    sink.on_token = [shared, i](int32_t t) {
      absl::MutexLock lock(&shared->mu);
      shared->run.tokens[i].push_back(t);
    };
    sink.on_done = [shared, i](absl::Status s, FinishReason, int32_t) {
      absl::MutexLock lock(&shared->mu);
      shared->run.done[i] = std::move(s);
      --shared->left;
    };
  }
  ChoiceRun out;
  out.started = node.StartChoices(call, std::move(sinks), CancellationToken());
  if (out.started.ok()) {
    if (after_start) after_start(node);
    EXPECT_TRUE(WaitFor([&] {
      absl::MutexLock lock(&shared->mu);
      return shared->left == 0;
    }));
    absl::MutexLock lock(&shared->mu);
    out.done = shared->run.done;
    out.tokens = shared->run.tokens;
  }
  return out;
}

// One sequence with this first token and sampling (Start): its generated tokens.
std::vector<int32_t> DecodeOne(DecodeNode& node, const KvHandle& kv, int32_t max_new_tokens,
                               int32_t first, const SamplingParams& sampling = {}) {
  auto done = std::make_shared<absl::Notification>();
  auto tokens = std::make_shared<std::vector<int32_t>>();
  DecodeCall call;
  call.request_id = kv.request_id;
  call.first_token = first;
  call.kv = kv;
  call.sampling = sampling;
  call.max_new_tokens = max_new_tokens;
  DecodeSink sink;
  sink.on_token = [tokens](int32_t t) { tokens->push_back(t); };
  sink.on_done = [done](absl::Status s, FinishReason, int32_t) {
    EXPECT_OK(s);
    done->Notify();
  };
  EXPECT_OK(node.Start(call, std::move(sink), CancellationToken()));
  EXPECT_TRUE(done->WaitForNotificationWithTimeout(kBound));
  return *tokens;
}

TEST_F(ChoicesTest, ChoicesPullOnceShareThePromptAndDecodeAsOneSequenceEach) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  // 40 prompt tokens in 16-token blocks: 2 full blocks shared, the partial third copied per
  // choice; 40 + 8 positions = 3 blocks a choice.
  const std::vector<int32_t> one_a = DecodeOne(*node, prefill_->Lease(kFast, "a", 40), 8, 7);
  const std::vector<int32_t> one_b = DecodeOne(*node, prefill_->Lease(kFast, "b", 40), 8, 9);
  ASSERT_EQ(one_a.size(), 7u);
  const int64_t bytes_one = net_.bytes("p-fast") / 2;
  const int64_t blocks_before = node->blocks_allocated();
  ExpectAllBlocksFree(*node);

  ChoiceRun run = DecodeChoices(*node, prefill_->Lease(kFast, "c", 40), 8, {7, 9, 7});
  ASSERT_OK(run.started);
  for (int32_t i = 0; i < 3; ++i) EXPECT_TRUE(run.done[i].ok()) << i << ": " << run.done[i];
  // The KV crossed once: the same bytes as one sequence's call.
  EXPECT_EQ(run.started->bytes, bytes_one);
  EXPECT_EQ(net_.bytes("p-fast"), 3 * bytes_one);
  // 3 blocks for choice 0, 1 more for each further choice (its copy of the partial block).
  EXPECT_EQ(node->blocks_allocated() - blocks_before, 3 + 2 * 1);
  // Each choice decodes what one sequence with its first token does: a shared partial block
  // would have let one choice's writes at position 40 into another's attention.
  EXPECT_EQ(run.tokens[0], one_a);
  EXPECT_EQ(run.tokens[1], one_b);
  EXPECT_EQ(run.tokens[2], one_a);
  EXPECT_EQ(prefill_->releases_held(), 3);
  ExpectAllBlocksFree(*node);
  EXPECT_EQ(node->block_free_errors(), 0);
}

TEST_F(ChoicesTest, ChoiceISamplesWithSeedPlusI) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  SamplingParams sampling;
  sampling.temperature = 1.5f;
  sampling.seed = 1000;
  ChoiceRun run = DecodeChoices(*node, prefill_->Lease(kFast, "n", 32), 12, {5, 5, 5}, sampling);
  ASSERT_OK(run.started);
  for (int32_t i = 0; i < 3; ++i) {
    SamplingParams own = sampling;
    own.seed = sampling.seed + i;
    EXPECT_EQ(run.tokens[i], DecodeOne(*node, prefill_->Lease(kFast, "one", 32), 12, 5, own))
        << "choice " << i;
  }
  // A prompt on a block boundary (32 tokens): both blocks shared, nothing copied.
  EXPECT_NE(run.tokens[0], run.tokens[1]);
  ExpectAllBlocksFree(*node);
}

TEST_F(ChoicesTest, CancellingTheCallEndsEveryChoiceAndFreesEveryBlock) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  const int32_t start = node->free_blocks();
  // 40 + 100 positions: 9 blocks a choice, 2 shared: 9 + 7 = all 16 blocks.
  ChoiceRun run =
      DecodeChoices(*node, prefill_->Lease(kFast, "x", 40), 100, {7, 9}, {}, [](DecodeNode& n) {
        EXPECT_EQ(n.free_blocks(), 0);
        EXPECT_TRUE(n.Cancel("x"));
      });
  ASSERT_OK(run.started);
  for (int32_t i = 0; i < 2; ++i) {
    EXPECT_THAT(run.done[i], StatusIs(absl::StatusCode::kCancelled, ::testing::_)) << i;
  }
  ExpectAllBlocksFree(*node);
  EXPECT_EQ(node->free_blocks(), start);
  EXPECT_EQ(node->block_free_errors(), 0);
}

TEST_F(ChoicesTest, FailedPullFreesEveryChoicesBlocks) {
  std::unique_ptr<DecodeNode> node = NewNode(absl::Seconds(20), absl::Milliseconds(200));
  ASSERT_NE(node, nullptr);
  net_.SetFaults("p-fast", FakeFaults{.stall_after_bytes = 0});
  ChoiceRun run = DecodeChoices(*node, prefill_->Lease(kFast, "f", 40), 8, {7, 9, 11});
  EXPECT_THAT(run.started, StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  EXPECT_EQ(prefill_->releases(), 1);
  ExpectAllBlocksFree(*node);
  EXPECT_EQ(node->block_free_errors(), 0);
}

TEST_F(ChoicesTest, ChoicesAreCheckedBeforeAnyBlockIsTaken) {
  std::unique_ptr<DecodeNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  ChoiceRun bad = DecodeChoices(*node, prefill_->Lease(kFast, "v", 40), 8, {7, vocab_});
  EXPECT_THAT(bad.started,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("choice 1's first token")));
  // Three choices of 40 + 200 positions need 15 + 2 * 13 blocks: more than the instance has.
  ChoiceRun big = DecodeChoices(*node, prefill_->Lease(kFast, "w", 40), 200, {7, 9, 11});
  EXPECT_THAT(big.started, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("in total")));
  ExpectAllBlocksFree(*node);
  EXPECT_EQ(node->blocks_allocated(), 0);
}

}  // namespace
}  // namespace tandem::testing
