// PrefillNodeTest: the fixture of the PrefillNode tests (prefill_node_test.cc: leases, layouts,
// pipelining, prefix cache; prefill_node_kv_integrity_test.cc: digests and generation fencing) —
// a PrefillNode and DecodeNodes of any layout over the in-process fake transport, one synthetic
// model per test binary, and InProcessPrefill, the decode side's view of a PrefillNode here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

using ::testing::AllOf;
using ::testing::HasSubstr;

inline constexpr absl::Duration kBound = absl::Seconds(20);

// A call for `prompt` as the tests send it: sample step 0, the node's default lease, kBound from
// now.
inline PrefillCall TestCall(std::string id, std::vector<int32_t> prompt, int32_t max_new_tokens,
                            SamplingParams sampling = {}) {
  PrefillCall call;
  call.request_id = std::move(id);
  call.prompt = std::move(prompt);
  call.sampling = std::move(sampling);
  call.max_new_tokens = max_new_tokens;
  call.deadline = absl::Now() + kBound;
  return call;
}

inline bool WaitFor(const std::function<bool()>& condition) {
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
    absl::StatusOr<std::optional<KvProgressEvent>> Next(absl::Duration timeout,
                                                        const CancellationToken& cancel) override {
      const KvProgressSnapshot now = p_->Await(seen_, timeout, &cancel);
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

  // `cancel`: the request's token (none: never cancelled).
  absl::StatusOr<PrefillOutcome> Prefill(PrefillNode& node, const std::string& id,
                                         const CancellationToken* cancel = nullptr) {
    const CancellationToken never;
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 37; ++i) prompt.push_back(10 + (i * 7) % 250);
    return node.Prefill(TestCall(id, std::move(prompt), 8), cancel != nullptr ? *cancel : never);
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
        decode.Start(call, std::move(sink), CancellationToken());
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

  inline static std::string* model_path_ = nullptr;
  fake::FakeKvNetwork net_;
  int next_engine_ = 0;
};

}  // namespace tandem::testing
