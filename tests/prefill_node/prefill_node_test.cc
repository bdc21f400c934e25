// PrefillNode over the in-process fake transport (no processes, no UCX): leases — release,
// renew, expiry, wrong epoch, cancel — always give every block back; and a prompt prefilled
// here, pulled by DecodeNodes of two different layouts through the fake transport and decoded,
// gives the same greedy tokens on both (a wrong byte in either plan would show). With the prefix
// cache: a prompt sharing a cached prefix reuses its blocks (the KvHandle names them), computes
// only the suffix, and decodes to the same tokens as on a node without the cache. Provable KV
// (issue 28): every pull here is checked against the prefill's KV digests; a byte flipped in the
// prefill's pool, or a block freed and reused under a live handle (a lease bookkeeping bug),
// fails the transfer — and the retry decodes the right tokens.
#include "prefill_node/prefill_node.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "attention/pool_layout.h"
#include "decode_node/decode_node.h"
#include "gtest/gtest.h"
#include "kv_transfer/fake/fake_kv_puller.h"
#include "kv_transfer/fake/fake_kv_source.h"
#include "kv_transfer/kv_digest.h"
#include "model/tools/synthetic_model.h"
#include "tests/engine/llamacpp_fixture.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::Duration kBound = absl::Seconds(20);

bool WaitFor(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + kBound;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// The decode side's view of a PrefillNode in this process.
class InProcessPrefill final : public PrefillClient {
 public:
  explicit InProcessPrefill(PrefillNode* node) : node_(node) {}
  absl::StatusOr<TransferMetadata> GetTransferMetadata(const std::string&, absl::Time) override {
    return node_->metadata();
  }
  absl::StatusOr<std::optional<absl::Time>> RenewLease(const KvHandle& kv, absl::Time) override {
    return node_->RenewLease(kv.request_id, kv.generation, absl::ZeroDuration());
  }
  absl::StatusOr<bool> ReleaseKv(const KvHandle& kv, absl::Time) override {
    return node_->ReleaseKv(kv.request_id, kv.epoch, kv.generation, kv.block_table,
                            kv.block_generations);
  }
  // Reads the node's KvProgress directly; every distinct state is one message.
  absl::StatusOr<std::unique_ptr<KvWatch>> WatchKv(const KvHandle& kv, absl::Time) override {
    absl::StatusOr<std::shared_ptr<const KvProgress>> progress =
        node_->WatchKv(kv.request_id, kv.generation);
    if (!progress.ok()) return progress.status();
    return std::unique_ptr<KvWatch>(new Watch(*std::move(progress)));
  }

 private:
  class Watch final : public KvWatch {
   public:
    explicit Watch(std::shared_ptr<const KvProgress> p) : p_(std::move(p)) {}
    absl::StatusOr<std::optional<KvProgressEvent>> Next(absl::Duration timeout) override {
      const KvProgressSnapshot now = p_->Await(seen_, timeout);
      if (!now.status.ok()) return now.status;
      if (now == seen_ && !now.done) return std::optional<KvProgressEvent>();
      seen_ = now;
      return std::optional<KvProgressEvent>(KvProgressEvent{
          now.tokens_ready, now.done, now.first_token, now.kv_digests, now.first_logprobs});
    }

   private:
    std::shared_ptr<const KvProgress> p_;
    KvProgressSnapshot seen_{.tokens_ready = -1};
  };

  PrefillNode* node_;
};

class PrefillNodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_path_ = new std::string(
        absl::StrCat(::testing::TempDir(), "/prefill_node_test_", getpid(), ".gguf"));
    ASSERT_OK(WriteSyntheticModel(SyntheticModelOptions{}, *model_path_));
  }
  static void TearDownTestSuite() {
    std::remove(model_path_->c_str());
    delete model_path_;
  }

  std::unique_ptr<PrefillNode> NewNode(absl::Duration lease = absl::Seconds(30),
                                       bool prefix_cache = true,
                                       ParallelConfig parallel = ParallelConfig{2, 1, 1, 16, 16},
                                       int64_t kv_bytes_per_rank = 1 << 20,
                                       bool kv_digests = true) {
    PrefillNodeOptions o;
    o.model_path = *model_path_;
    o.advertised_address = "prefill:1";
    o.instance.parallel = parallel;
    o.instance.threads_per_rank = 1;
    o.instance.kv_bytes_per_rank = kv_bytes_per_rank;
    o.default_lease = lease;
    o.prefix_cache = prefix_cache;
    o.kv_digests = kv_digests;
    o.engine_id = absl::StrCat("p", next_engine_++);
    o.sources = fake::FakeSourceFactory(&net_);
    absl::StatusOr<std::unique_ptr<PrefillNode>> node = PrefillNode::Create(o);
    EXPECT_OK(node);
    return node.ok() ? std::move(*node) : nullptr;
  }

  absl::StatusOr<PrefillOutcome> Prefill(
      PrefillNode& node, const std::string& id,
      std::function<bool()> cancelled = [] { return false; }) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 37; ++i) prompt.push_back(10 + (i * 7) % 250);
    return node.Prefill(id, prompt, SamplingParams{}, 0, 8, absl::ZeroDuration(),
                        absl::Now() + kBound, cancelled);
  }

  // Pulls `out`'s KV into `decode` and decodes `max_new_tokens`: first token included. The
  // transfer's outcome in *started when given (then a failure is not a test failure).
  std::vector<int32_t> Decode(PrefillNode& prefill, DecodeNode& decode, const std::string& id,
                              const PrefillOutcome& out, int32_t max_new_tokens,
                              absl::StatusOr<TransferStats>* started_out = nullptr) {
    DecodeCall call;
    call.request_id = id;
    call.first_token = out.first_token;
    call.kv.engine_id = prefill.engine_id();
    call.kv.epoch = prefill.epoch();
    call.kv.request_id = id;
    call.kv.block_table = out.block_table;
    call.kv.num_tokens = out.num_tokens;
    call.kv.layout = prefill.layout();
    call.kv.lease_expiry = out.lease_expiry;
    call.kv.generation = out.generation;
    call.kv.prefill_address = prefill.advertised_address();
    call.kv.block_generations = out.block_generations;
    call.kv.kv_digests = out.kv_digests;
    call.max_new_tokens = max_new_tokens;
    auto tokens = std::make_shared<std::vector<int32_t>>(1, out.first_token);
    auto done = std::make_shared<absl::Notification>();
    auto status = std::make_shared<absl::Status>();
    DecodeSink sink;
    sink.on_token = [tokens](int32_t t) { tokens->push_back(t); };
    sink.on_done = [done, status](absl::Status s, FinishReason, int32_t) {
      *status = std::move(s);
      done->Notify();
    };
    const absl::StatusOr<TransferStats> started =
        decode.Start(call, std::move(sink), [] { return false; });
    if (started_out != nullptr) *started_out = started;
    if (started_out == nullptr) EXPECT_OK(started);
    if (!started.ok()) return {};
    EXPECT_EQ(started->digests_verified, !out.kv_digests.empty());
    EXPECT_TRUE(done->WaitForNotificationWithTimeout(kBound));
    EXPECT_OK(*status);
    return *tokens;
  }

  std::unique_ptr<DecodeNode> NewDecode(std::shared_ptr<PrefillClient> client, int32_t tp) {
    DecodeNodeOptions o;
    o.model_path = *model_path_;
    o.advertised_address = absl::StrCat("decode-tp", tp);
    o.instance.parallel = ParallelConfig{tp, 1, 1, 8, 1};
    o.instance.threads_per_rank = 1;
    o.instance.kv_bytes_per_rank = 1 << 20;
    o.pullers = fake::FakePullerFactory(&net_);
    o.prefill = std::move(client);
    absl::StatusOr<std::unique_ptr<DecodeNode>> decode = DecodeNode::Create(o);
    EXPECT_OK(decode);
    return decode.ok() ? std::move(*decode) : nullptr;
  }

  static std::string* model_path_;
  fake::FakeKvNetwork net_;
  int next_engine_ = 0;
};

std::string* PrefillNodeTest::model_path_ = nullptr;

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
  EXPECT_THAT(Prefill(*node, "r1", [] { return true; }),
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
        (*decode)->Start(call, std::move(sink), [] { return false; });
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
        prefill->Prefill(name, f.prompt, SamplingParams{}, 0, 4, absl::ZeroDuration(),
                         absl::Now() + kBound, [] { return false; });
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
            pipelined ? (*prefill)->StartPipelined(id, prompt, sampling, 0, 8, absl::ZeroDuration(),
                                                   absl::Now() + kBound, [] { return false; })
                      : (*prefill)->Prefill(id, prompt, sampling, 0, 8, absl::ZeroDuration(),
                                            absl::Now() + kBound, [] { return false; });
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
            (*decode)->Start(call, std::move(sink), [] { return false; });
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
      (*node)->StartPipelined("r", prompt, SamplingParams{}, 0, 8, absl::ZeroDuration(),
                              absl::Now() + kBound, [] { return false; });
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
      (*node)->StartPipelined("r", std::vector<int32_t>(200, 42), SamplingParams{}, 0, 8,
                              absl::ZeroDuration(), absl::Now() + kBound, [] { return false; });
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
            prefill->Prefill(id, prompts[i], SamplingParams{}, 0, 6, absl::ZeroDuration(),
                             absl::Now() + kBound, [] { return false; });
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
  // changes after that.
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 37; ++i) prompt.push_back(10 + (i * 7) % 250);
  absl::StatusOr<PrefillOutcome> early =
      prefill.StartPipelined("r1", prompt, SamplingParams{}, 0, 8, absl::ZeroDuration(),
                             absl::Now() + kBound, [] { return false; });
  ASSERT_OK(early);
  absl::StatusOr<std::shared_ptr<const KvProgress>> progress =
      prefill.WatchKv("r1", early->generation);
  ASSERT_OK(progress);
  KvProgressSnapshot seen{.tokens_ready = -1};
  while (seen.tokens_ready < 16 && !seen.final()) seen = (*progress)->Await(seen, kBound);
  ASSERT_TRUE(seen.status.ok()) << seen.status;
  const PoolGeometry g = RankPoolGeometry(prefill.layout(), 0);
  auto* pool = static_cast<std::byte*>(prefill.TestOnlyPool(0).base());
  pool[KvByteOffset(g, early->block_table[0], 0, 0, 0, 3)] ^= std::byte{0x08};
  while (!seen.final()) seen = (*progress)->Await(seen, kBound);
  ASSERT_TRUE(seen.done) << seen.status;
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
  EXPECT_THAT(decode->Start(call, std::move(sink), [] { return false; }),
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
        prefill->Prefill("r2", other, SamplingParams{}, 0, 8, absl::ZeroDuration(),
                         absl::Now() + kBound, [] { return false; });
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
