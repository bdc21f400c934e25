// PrefillNode over the in-process fake transport (no processes, no UCX): leases — release,
// renew, expiry, wrong epoch, cancel — always give every block back; and a prompt prefilled
// here, pulled by DecodeNodes of two different layouts through the fake transport and decoded,
// gives the same greedy tokens on both (a wrong byte in either plan would show). With the prefix
// cache: a prompt sharing a cached prefix reuses its blocks (the KvHandle names them), computes
// only the suffix, and decodes to the same tokens as on a node without the cache. Digests and
// generation fencing: prefill_node_kv_integrity_test.cc (same binary and fixture).
#include "prefill_node/prefill_node.h"

#include "tests/prefill_node/prefill_node_fixture.h"

namespace tandem::testing {
namespace {

TEST_F(PrefillNodeTest, RefusesToBeBuiltWithoutASourceFactory) {
  PrefillNodeOptions o;
  o.model_path = *model_path_;
  EXPECT_THAT(PrefillNode::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("source factory")));
}

TEST_F(PrefillNodeTest, ReleaseWhileHeldFreesTheBlocksOnce) {
  std::unique_ptr<PrefillNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  const int32_t total = node->Load().total_blocks;
  absl::StatusOr<PrefillOutcome> out = Prefill(*node, "r1");
  ASSERT_OK(out);
  EXPECT_EQ(out->num_tokens, 37);
  EXPECT_EQ(node->Load().leases, 1);
  EXPECT_EQ(node->Load().free_blocks, total - static_cast<int32_t>(out->block_table.size()));
  EXPECT_FALSE(node->ReleaseKv("r1", node->epoch() + 1, out->generation));  // wrong epoch
  EXPECT_EQ(node->Load().leases, 1);
  EXPECT_TRUE(node->ReleaseKv("r1", node->epoch(), out->generation));
  EXPECT_FALSE(node->ReleaseKv("r1", node->epoch(), out->generation));
  EXPECT_EQ(node->Load().free_blocks, total);
  EXPECT_EQ(node->Load().leases, 0);
}

// A pipelined prefill answers before any first token, so it cannot hand over n of them; the
// refusal names the conflict and takes nothing.
TEST_F(PrefillNodeTest, PipelinedPrefillRefusesSeveralChoices) {
  std::unique_ptr<PrefillNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  const int32_t total = node->Load().total_blocks;
  PrefillCall call = TestCall("r1", std::vector<int32_t>(37, 42), 8);
  call.choices = 2;
  EXPECT_THAT(node->StartPipelined(std::move(call), CancellationToken()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not with early_handle")));
  EXPECT_EQ(node->Load().leases, 0);
  EXPECT_EQ(node->Load().free_blocks, total);
}

TEST_F(PrefillNodeTest, ExpiredLeaseFreesItsBlocksAndCanNeitherBeRenewedNorReleased) {
  std::unique_ptr<PrefillNode> node = NewNode(absl::Milliseconds(100));
  ASSERT_NE(node, nullptr);
  const int32_t total = node->Load().total_blocks;
  absl::StatusOr<PrefillOutcome> out = Prefill(*node, "r1");
  ASSERT_OK(out);
  ASSERT_TRUE(WaitFor([&] { return node->Load().leases == 0; }));
  EXPECT_EQ(node->Load().free_blocks, total);
  EXPECT_EQ(node->RenewLease("r1", out->generation, absl::ZeroDuration()), std::nullopt);
  EXPECT_FALSE(node->ReleaseKv("r1", node->epoch(), out->generation));
}

TEST_F(PrefillNodeTest, RenewExtendsTheLease) {
  std::unique_ptr<PrefillNode> node = NewNode(absl::Seconds(2));
  ASSERT_NE(node, nullptr);
  absl::StatusOr<PrefillOutcome> out = Prefill(*node, "r1");
  ASSERT_OK(out);
  std::optional<absl::Time> renewed = node->RenewLease("r1", out->generation, absl::Seconds(10));
  ASSERT_TRUE(renewed.has_value());
  EXPECT_GT(*renewed, out->lease_expiry + absl::Seconds(5));
  EXPECT_EQ(node->RenewLease("r1", out->generation + 1, absl::Seconds(10)), std::nullopt);
  EXPECT_TRUE(node->ReleaseKv("r1", node->epoch(), out->generation));
}

TEST_F(PrefillNodeTest, CancelledPrefillIsCancelledAndKeepsNoBlocks) {
  std::unique_ptr<PrefillNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  const int32_t total = node->Load().total_blocks;
  CancellationToken cancel;
  cancel.Cancel();
  EXPECT_THAT(Prefill(*node, "r1", &cancel),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled")));
  EXPECT_TRUE(WaitFor([&] { return node->Load().free_blocks == total; }));
  EXPECT_EQ(node->Load().leases, 0);
}

// ReleaseKv by request id (generation 0), as the router sends it after giving up on a Prefill
// call: frees a lease already taken, whatever its generation.
TEST_F(PrefillNodeTest, ReleaseByRequestIdFreesTheLeaseItHolds) {
  std::unique_ptr<PrefillNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  const int32_t total = node->Load().total_blocks;
  ASSERT_OK(Prefill(*node, "r1"));
  ASSERT_OK(Prefill(*node, "r2"));
  EXPECT_EQ(node->Load().leases, 2);
  EXPECT_FALSE(node->ReleaseKv("r1", node->epoch() + 1, 0));  // another epoch: not this node's
  EXPECT_EQ(node->Load().leases, 2);
  EXPECT_TRUE(node->ReleaseKv("r1", 0, 0));
  EXPECT_EQ(node->Load().leases, 1);
  EXPECT_TRUE(node->ReleaseKv("r2", node->epoch(), 0));
  EXPECT_EQ(node->Load().leases, 0);
  EXPECT_EQ(node->Load().free_blocks, total);
  EXPECT_EQ(node->Load().leases_released_total, 2);
  EXPECT_EQ(node->Load().leases_released_early_total, 0);
}

// The release arrives while the prefill still runs (here: queued for blocks), before its lease
// exists: the node remembers it, and the lease the prefill then takes is released at once.
TEST_F(PrefillNodeTest, ReleaseByRequestIdWhileThePrefillRunsReleasesItsLeaseAtOnce) {
  std::unique_ptr<PrefillNode> probe = NewNode(absl::Seconds(30), /*prefix_cache=*/false);
  ASSERT_NE(probe, nullptr);
  const int64_t block_bytes = (int64_t{1} << 20) / probe->Load().total_blocks;
  // Four blocks: a 37-token prompt takes three, so a second one waits for the first's lease.
  std::unique_ptr<PrefillNode> node = NewNode(absl::Seconds(30), /*prefix_cache=*/false,
                                              ParallelConfig{2, 1, 1, 16, 16}, 4 * block_bytes);
  ASSERT_NE(node, nullptr);
  ASSERT_EQ(node->Load().total_blocks, 4);
  absl::StatusOr<PrefillOutcome> first = Prefill(*node, "r1");
  ASSERT_OK(first);
  absl::StatusOr<PrefillOutcome> second = absl::UnknownError("not run");
  std::thread waiting([&] { second = Prefill(*node, "r2"); });
  ASSERT_TRUE(WaitFor([&] { return node->Load().queued == 1; }));
  EXPECT_FALSE(node->ReleaseKv("r2", 0, 0));  // no lease yet: remembered while r2 runs
  EXPECT_TRUE(node->ReleaseKv("r1", node->epoch(), first->generation));  // r2 gets its blocks
  waiting.join();  // r2's Prefill is bounded by its deadline (kBound)
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kCancelled, HasSubstr("released by request id")));
  EXPECT_EQ(node->Load().leases, 0);
  EXPECT_EQ(node->Load().free_blocks, 4);
  EXPECT_EQ(node->Load().leases_released_early_total, 1);
  // Used up by that prefill: the next request with the id keeps its lease.
  absl::StatusOr<PrefillOutcome> again = Prefill(*node, "r2");
  ASSERT_OK(again);
  EXPECT_EQ(node->Load().leases, 1);
  EXPECT_TRUE(node->ReleaseKv("r2", node->epoch(), again->generation));
}

// With no lease and no prefill of that id running there is nothing to release: nothing is
// remembered, and a later prefill reusing the id keeps its lease.
TEST_F(PrefillNodeTest, ReleaseByRequestIdOfNothingRunningIsNotRemembered) {
  std::unique_ptr<PrefillNode> node = NewNode();
  ASSERT_NE(node, nullptr);
  EXPECT_FALSE(node->ReleaseKv("r1", 0, 0));
  absl::StatusOr<PrefillOutcome> out = Prefill(*node, "r1");
  ASSERT_OK(out);
  EXPECT_EQ(node->Load().leases, 1);
  EXPECT_EQ(node->Load().leases_released_early_total, 0);
  EXPECT_TRUE(node->ReleaseKv("r1", node->epoch(), out->generation));
}

// Prefill here (tp 2), decode on tp 1 and on tp 2 pulling through the fake transport: the same
// greedy tokens.
TEST_F(PrefillNodeTest, KvPulledIntoTwoDecodeLayoutsDecodesTheSameTokens) {
  std::unique_ptr<PrefillNode> prefill = NewNode();
  ASSERT_NE(prefill, nullptr);
  auto client = std::make_shared<InProcessPrefill>(prefill.get());
  std::vector<std::vector<int32_t>> streams;
  for (int32_t tp : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("decode tp ", tp));
    DecodeNodeOptions o;
    o.model_path = *model_path_;
    o.advertised_address = absl::StrCat("decode-tp", tp);
    o.instance.parallel = ParallelConfig{tp, 1, 1, 8, 1};  // other block size and interleave
    o.instance.threads_per_rank = 1;
    o.instance.kv_bytes_per_rank = 1 << 20;
    o.pullers = fake::FakePullerFactory(&net_);
    o.prefill = client;
    absl::StatusOr<std::unique_ptr<DecodeNode>> decode = DecodeNode::Create(o);
    ASSERT_OK(decode);
    const int32_t free_before = (*decode)->free_blocks();

    absl::StatusOr<PrefillOutcome> out = Prefill(*prefill, absl::StrCat("r", tp));
    ASSERT_OK(out);
    DecodeCall call;
    call.request_id = absl::StrCat("r", tp);
    call.first_token = out->first_token;
    call.kv.engine_id = prefill->engine_id();
    call.kv.epoch = prefill->epoch();
    call.kv.request_id = call.request_id;
    call.kv.block_table = out->block_table;
    call.kv.num_tokens = out->num_tokens;
    call.kv.layout = prefill->layout();
    call.kv.lease_expiry = out->lease_expiry;
    call.kv.generation = out->generation;
    call.kv.prefill_address = "prefill:1";
    call.kv.block_generations = out->block_generations;
    call.kv.kv_digests = out->kv_digests;
    ASSERT_FALSE(out->kv_digests.empty());
    call.max_new_tokens = 8;
    auto tokens = std::make_shared<std::vector<int32_t>>(1, out->first_token);
    auto done = std::make_shared<absl::Notification>();
    auto status = std::make_shared<absl::Status>();
    DecodeSink sink;
    sink.on_token = [tokens](int32_t t) { tokens->push_back(t); };
    sink.on_done = [done, status](absl::Status s, FinishReason, int32_t) {
      *status = std::move(s);
      done->Notify();
    };
    absl::StatusOr<TransferStats> started =
        (*decode)->Start(call, std::move(sink), CancellationToken());
    ASSERT_OK(started);
    EXPECT_GT(started->bytes, 0);
    EXPECT_TRUE(started->digests_verified);
    ASSERT_TRUE(done->WaitForNotificationWithTimeout(kBound));
    ASSERT_OK(*status);
    EXPECT_EQ(prefill->Load().leases, 0);  // released after the pull
    EXPECT_TRUE(WaitFor([&] { return (*decode)->free_blocks() == free_before; }));
    streams.push_back(*tokens);
  }
  ASSERT_EQ(streams.size(), 2u);
  EXPECT_GE(streams[0].size(), 2u);
  EXPECT_EQ(streams[0], streams[1]);
  EXPECT_EQ(prefill->Load().free_blocks, prefill->Load().total_blocks);
}

// Issue 23: each architecture's pieces (Qwen2's QKV biases, Qwen3's per-head Q/K norms, Llama 3's
// RoPE divisors, YaRN over 40 tokens past its original context of 32) through a mismatched pair —
// prefill TP 1 x PCP 2 x DCP 2, decode TP 2 (heads split) — decode llama.cpp's own greedy tokens
// for the same model and prompt (tests/engine/testdata/llamacpp, written by
// bench/peer/reference_logits.sh).
TEST_F(PrefillNodeTest, EachArchitectureDecodesLlamaCppsTokensAcrossMismatchedLayouts) {
  // NewNode and NewDecode load *model_path_: pointed at each architecture's model below, and put
  // back however the test ends.
  absl::Cleanup restore = [saved = *model_path_] { *model_path_ = saved; };
  for (const char* name : {"qwen2", "qwen3", "phi3", "llama3_rope", "qwen2_yarn"}) {
    SCOPED_TRACE(name);
    const LlamaCppFixture f = ReadLlamaCppFixture(name);
    ASSERT_EQ(f.greedy.size(), 4u);
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/prefill_node_test_", name, "_", getpid(), ".gguf");
    ASSERT_OK(WriteSyntheticModel(f.options, path));
    *model_path_ = path;
    std::unique_ptr<PrefillNode> prefill =
        NewNode(absl::Seconds(30), /*prefix_cache=*/false, ParallelConfig{1, 2, 2, 8, 1});
    ASSERT_NE(prefill, nullptr);
    std::unique_ptr<DecodeNode> decode =
        NewDecode(std::make_shared<InProcessPrefill>(prefill.get()), 2);
    ASSERT_NE(decode, nullptr);
    absl::StatusOr<PrefillOutcome> out =
        prefill->Prefill(TestCall(name, f.prompt, 4), CancellationToken());
    ASSERT_OK(out);
    EXPECT_EQ(Decode(*prefill, *decode, name, *out, 4), f.greedy);
    std::remove(path.c_str());
  }
}

// Pipelined transfer: an early handle (StartPipelined) pulled chunk by chunk while the prefill
// runs, with max_prefill_tokens aligned with neither side's block size, on a TP and a PCP x DCP
// prefill layout into two decode layouts, decodes the same tokens as the unpipelined path; the
// lease is released after the pull and every block comes back on both sides.
TEST_F(PrefillNodeTest, PipelinedPullDecodesLikeTheUnpipelinedPath) {
  for (const ParallelConfig& pl :
       {ParallelConfig{2, 1, 1, 16, 16}, ParallelConfig{1, 2, 2, 8, 1}}) {
    SCOPED_TRACE(pl.ToString());
    PrefillNodeOptions po;
    po.model_path = *model_path_;
    po.advertised_address = "prefill:1";
    po.instance.parallel = pl;
    po.instance.threads_per_rank = 1;
    po.instance.kv_bytes_per_rank = 1 << 20;
    po.prefill.max_prefill_tokens = 7;
    po.engine_id = absl::StrCat("p", next_engine_++);
    po.sources = fake::FakeSourceFactory(&net_);
    absl::StatusOr<std::unique_ptr<PrefillNode>> prefill = PrefillNode::Create(po);
    ASSERT_OK(prefill);
    auto client = std::make_shared<InProcessPrefill>(prefill->get());
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 61; ++i) prompt.push_back(10 + (i * 7) % 250);
    for (int32_t tp : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("decode tp ", tp));
      DecodeNodeOptions o;
      o.model_path = *model_path_;
      o.advertised_address = absl::StrCat("decode-tp", tp);
      o.instance.parallel = ParallelConfig{tp, 1, 1, 8, 1};
      o.instance.threads_per_rank = 1;
      o.instance.kv_bytes_per_rank = 1 << 20;
      o.pullers = fake::FakePullerFactory(&net_);
      o.prefill = client;
      absl::StatusOr<std::unique_ptr<DecodeNode>> decode = DecodeNode::Create(o);
      ASSERT_OK(decode);
      const int32_t free_before = (*decode)->free_blocks();
      std::vector<std::vector<int32_t>> streams;
      // Log-probabilities too: a pipelined call's first token gets the prefill's from the final
      // progress message, the same as an unpipelined prefill returns.
      std::vector<std::vector<TokenLogprobs>> logprob_streams;
      SamplingParams sampling;
      sampling.logprobs = 2;
      for (const bool pipelined : {false, true}) {
        const std::string id = absl::StrCat("r", tp, pipelined);
        absl::StatusOr<PrefillOutcome> out =
            pipelined
                ? (*prefill)->StartPipelined(TestCall(id, prompt, 8, sampling), CancellationToken())
                : (*prefill)->Prefill(TestCall(id, prompt, 8, sampling), CancellationToken());
        ASSERT_OK(out);
        EXPECT_EQ(out->num_tokens, 61);
        DecodeCall call;
        call.request_id = id;
        call.first_token = pipelined ? -1 : out->first_token;  // ignored when pipelined
        call.pipelined = pipelined;
        call.kv.engine_id = (*prefill)->engine_id();
        call.kv.epoch = (*prefill)->epoch();
        call.kv.request_id = id;
        call.kv.block_table = out->block_table;
        call.kv.num_tokens = out->num_tokens;
        call.kv.layout = (*prefill)->layout();
        call.kv.lease_expiry = out->lease_expiry;
        call.kv.generation = out->generation;
        call.kv.prefill_address = "prefill:1";
        call.kv.block_generations = out->block_generations;
        call.kv.kv_digests = out->kv_digests;  // early handle: none; the final progress has them
        EXPECT_EQ(out->kv_digests.empty(), pipelined);
        call.max_new_tokens = 8;
        call.sampling = sampling;
        auto tokens = std::make_shared<std::vector<int32_t>>();
        auto logprobs = std::make_shared<std::vector<TokenLogprobs>>();
        if (!pipelined) {
          tokens->push_back(out->first_token);
          logprobs->push_back(out->first_logprobs);
        }
        auto done = std::make_shared<absl::Notification>();
        auto status = std::make_shared<absl::Status>();
        DecodeSink sink;
        sink.on_token = [tokens](int32_t t) { tokens->push_back(t); };
        sink.on_logprobs = [logprobs](const TokenLogprobs& l) { logprobs->push_back(l); };
        sink.on_done = [done, status](absl::Status s, FinishReason, int32_t) {
          *status = std::move(s);
          done->Notify();
        };
        absl::StatusOr<TransferStats> started =
            (*decode)->Start(call, std::move(sink), CancellationToken());
        ASSERT_OK(started);
        EXPECT_TRUE(started->digests_verified);
        if (pipelined) {
          EXPECT_GE(started->chunks, 1);
        }
        ASSERT_TRUE(done->WaitForNotificationWithTimeout(kBound));
        ASSERT_OK(*status);
        EXPECT_EQ((*prefill)->Load().leases, 0);  // released after the pull
        EXPECT_THAT((*prefill)->WatchKv(id, out->generation),
                    StatusIs(absl::StatusCode::kAborted, HasSubstr("no pipelined prefill")));
        EXPECT_TRUE(WaitFor([&] { return (*decode)->free_blocks() == free_before; }));
        streams.push_back(*tokens);
        logprob_streams.push_back(*logprobs);
      }
      ASSERT_EQ(streams.size(), 2u);
      EXPECT_EQ(streams[0].size(), 8u);
      EXPECT_EQ(streams[0], streams[1]);
      ASSERT_EQ(logprob_streams[0].size(), 8u);
      EXPECT_EQ(logprob_streams[0][0].top.size(), 2u);
      EXPECT_EQ(logprob_streams[0], logprob_streams[1]);
    }
    EXPECT_EQ((*prefill)->Load().free_blocks, (*prefill)->Load().total_blocks);
  }
}

// Releasing an early handle's lease while its prefill runs cancels the prefill, ends its
// progress with CANCELLED, and every block comes back once the prefill has stopped.
TEST_F(PrefillNodeTest, ReleasingAPipelinedLeaseCancelsThePrefill) {
  PrefillNodeOptions po;
  po.model_path = *model_path_;
  po.advertised_address = "prefill:1";
  po.instance.parallel = ParallelConfig{1, 1, 1, 16, 16};
  po.instance.threads_per_rank = 1;
  po.instance.kv_bytes_per_rank = 1 << 20;
  po.prefill.max_prefill_tokens = 1;  // one token per step: the prefill is still running
  po.engine_id = absl::StrCat("p", next_engine_++);
  po.sources = fake::FakeSourceFactory(&net_);
  absl::StatusOr<std::unique_ptr<PrefillNode>> node = PrefillNode::Create(po);
  ASSERT_OK(node);
  const int32_t total = (*node)->Load().total_blocks;
  std::vector<int32_t> prompt(200, 42);
  absl::StatusOr<PrefillOutcome> out =
      (*node)->StartPipelined(TestCall("r", prompt, 8), CancellationToken());
  ASSERT_OK(out);
  absl::StatusOr<std::shared_ptr<const KvProgress>> progress =
      (*node)->WatchKv("r", out->generation);
  ASSERT_OK(progress);
  EXPECT_EQ((*node)->Load().leases, 1);
  EXPECT_TRUE((*node)->ReleaseKv("r", (*node)->epoch(), out->generation));
  const KvProgressSnapshot end = (*progress)->Get();
  if (!end.done) {  // it may, rarely, have finished already
    EXPECT_EQ(end.status.code(), absl::StatusCode::kCancelled) << end.status;
    EXPECT_LT(end.tokens_ready, 200);
  }
  EXPECT_TRUE(WaitFor([&] { return (*node)->Load().free_blocks == total; }));
  EXPECT_EQ((*node)->Load().leases, 0);
}

// A node destroyed while a pipelined prefill still runs (its StartPipelined call returned at
// admission): the engine fails it through the node's callbacks, which must find the node's
// members alive (they once ran after them: use after destruction, visible under ASan/TSan).
TEST_F(PrefillNodeTest, DestroyedWhileAPipelinedPrefillRunsFailsItCleanly) {
  PrefillNodeOptions po;
  po.model_path = *model_path_;
  po.advertised_address = "prefill:1";
  po.instance.parallel = ParallelConfig{1, 1, 1, 16, 16};
  po.instance.threads_per_rank = 1;
  po.instance.kv_bytes_per_rank = 1 << 20;
  po.prefill.max_prefill_tokens = 1;  // one token per step: still running when destroyed
  po.engine_id = absl::StrCat("p", next_engine_++);
  po.sources = fake::FakeSourceFactory(&net_);
  absl::StatusOr<std::unique_ptr<PrefillNode>> node = PrefillNode::Create(po);
  ASSERT_OK(node);
  absl::StatusOr<PrefillOutcome> out =
      (*node)->StartPipelined(TestCall("r", std::vector<int32_t>(200, 42), 8), CancellationToken());
  ASSERT_OK(out);
  absl::StatusOr<std::shared_ptr<const KvProgress>> progress =
      (*node)->WatchKv("r", out->generation);
  ASSERT_OK(progress);
  const std::shared_ptr<const KvProgress> watched = *progress;  // outlives the node
  node->reset();
  const KvProgressSnapshot end = watched->Get();
  EXPECT_TRUE(end.final());
  if (!end.done) {  // it may, rarely, have finished first
    EXPECT_EQ(end.status.code(), absl::StatusCode::kUnavailable) << end.status;
  }
}

// A prompt sharing a cached prefix (its own prefix and another prompt's) reuses the cached
// blocks and computes only the suffix, on a plain, a DCP and a PCP layout; decoded through the
// fake transport (into another layout), its tokens equal those of a node without the cache.
TEST_F(PrefillNodeTest, PrefixCacheHitsDecodeLikeAColdNode) {
  std::vector<int32_t> base;
  for (int32_t i = 0; i < 50; ++i) base.push_back(10 + (i * 13) % 240);
  std::vector<int32_t> branch(base.begin(), base.begin() + 35);
  for (int32_t i = 0; i < 9; ++i) branch.push_back(200 - i);
  std::vector<int32_t> longer = base;
  longer.insert(longer.end(), {7, 8, 9});
  const std::vector<std::vector<int32_t>> prompts = {base, branch, longer, base};

  struct Layout {
    const char* name;
    ParallelConfig parallel;
  };
  for (const Layout& l : {Layout{"tp2", ParallelConfig{2, 1, 1, 16, 16}},
                          Layout{"tp4_dcp2_i1", ParallelConfig{4, 1, 2, 8, 1}},
                          Layout{"pcp2_i4", ParallelConfig{1, 2, 1, 16, 4}},
                          Layout{"pcp2_dcp2", ParallelConfig{1, 2, 2, 8, 8}}}) {
    SCOPED_TRACE(l.name);
    const int64_t v = l.parallel.block_size * l.parallel.dcp;
    DecodeNodeOptions o;
    o.model_path = *model_path_;
    o.advertised_address = "decode";
    o.instance.parallel = ParallelConfig{1, 1, 1, 8, 1};
    o.instance.threads_per_rank = 1;
    o.instance.kv_bytes_per_rank = 1 << 20;
    o.pullers = fake::FakePullerFactory(&net_);
    std::vector<std::vector<int32_t>> streams[2];
    for (const bool cached : {false, true}) {
      std::unique_ptr<PrefillNode> prefill = NewNode(absl::Seconds(30), cached, l.parallel);
      ASSERT_NE(prefill, nullptr);
      o.prefill = std::make_shared<InProcessPrefill>(prefill.get());
      absl::StatusOr<std::unique_ptr<DecodeNode>> decode = DecodeNode::Create(o);
      ASSERT_OK(decode);
      std::vector<int32_t> first_table;
      for (size_t i = 0; i < prompts.size(); ++i) {
        const std::string id = absl::StrCat(l.name, cached, "-", i);
        absl::StatusOr<PrefillOutcome> out =
            prefill->Prefill(TestCall(id, prompts[i], 6), CancellationToken());
        ASSERT_OK(out);
        const int64_t n = static_cast<int64_t>(prompts[i].size());
        // Expected reuse: the blocks of the longest earlier prompt's shared prefix, never the
        // block of the last token.
        const int64_t shared = i == 0 ? 0 : i == 1 ? 35 : 50;
        const int64_t want = cached ? std::min(shared / v, (n - 1) / v) * v : 0;
        EXPECT_EQ(out->cached_tokens, want) << "prompt " << i;
        EXPECT_EQ(out->num_tokens, n);
        if (i == 0) first_table = out->block_table;
        for (int64_t b = 0; b < want / v; ++b) EXPECT_EQ(out->block_table[b], first_table[b]);
        streams[cached].push_back(Decode(*prefill, **decode, id, *out, 6));
      }
      const NodeLoad load = prefill->Load();
      EXPECT_TRUE(WaitFor([&] { return prefill->Load().leases == 0; }));
      EXPECT_EQ(prefill->Load().free_blocks, load.total_blocks);
      EXPECT_EQ(prefill->Load().block_free_errors, 0);
      int64_t all = 0;
      for (const auto& p : prompts) all += static_cast<int64_t>(p.size());
      EXPECT_EQ(load.prefix_query_tokens, cached ? all : 0);
      EXPECT_EQ(load.prefix_hit_tokens + load.computed_prompt_tokens, all);
      EXPECT_EQ(load.prefix_hit_tokens > 0, cached);
      const std::optional<PrefixCacheDigestView> digest = prefill->PrefixDigest(1024);
      EXPECT_EQ(digest.has_value(), cached);
      if (digest.has_value()) {
        EXPECT_EQ(digest->block_tokens, v);
        EXPECT_EQ(static_cast<int64_t>(digest->block_hashes.size()), load.prefix_cached_blocks);
      }
    }
    EXPECT_EQ(streams[1], streams[0]);
  }
}

// Fault injection (issue 28): a byte of the prefill's pool flips after the prefill (while the
// handle is live). The decode node's digest check fails the transfer (ABORTED naming the
// prefill, so the router prefills again), nothing is leaked on either side, and the retry
// decodes exactly the tokens of an undisturbed run.

}  // namespace
}  // namespace tandem::testing
