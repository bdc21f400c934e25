// DecodeNode's colocated prefill (decode_node/colocated_prefill.h): a decode node that also
// prefills, on the fixture of decode_node_fixture.h.
#include "tests/decode_node/decode_node_fixture.h"

namespace tandem::testing {
namespace {

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
