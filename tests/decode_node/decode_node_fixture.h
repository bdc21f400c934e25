// The fixture of the DecodeNode tests (decode_node_test.cc, decode_node_colocated_test.cc):
// a DecodeNode with fakes on both sides (no processes, no UCX, no gRPC) — a small synthetic
// model, FakeKvPullers on an in-process FakeKvNetwork and a FakePrefill whose leases behave like
// the prefill node's — and the helpers every case uses to start, wait and check that all blocks
// came back.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "attention/pool_layout.h"
#include "decode_node/decode_node.h"
#include "engine/combined_engine.h"
#include "gtest/gtest.h"
#include "kv_transfer/fake/fake_kv_puller.h"
#include "kv_transfer/fake/fake_kv_source.h"
#include "model/format/model_loader.h"
#include "model/tools/synthetic_model.h"
#include "tests/decode_node/fake_prefill.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {

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

inline bool WaitFor(const std::function<bool()>& condition, absl::Duration limit = kBound) {
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
  std::vector<int32_t> tokens;  // what the sink got
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
    o.pull_chunk_bytes = pull_chunk_bytes_;
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

  // Start, then (if it started) the end of the decode, bounded. `cancel`: the request's token
  // (none: never cancelled).
  Outcome Decode(DecodeNode& node, const KvHandle& kv, int32_t max_new_tokens,
                 const CancellationToken* cancel = nullptr) {
    const CancellationToken never;
    struct Done {
      absl::Notification notification;
      absl::Status status;
      int32_t generated = 0;
      std::vector<int32_t> tokens;  // written on the engine thread before the notification
    };
    auto done = std::make_shared<Done>();
    DecodeCall call;
    call.request_id = kv.request_id;
    call.first_token = 7;
    call.kv = kv;
    call.max_new_tokens = max_new_tokens;
    DecodeSink sink;
    sink.on_token = [done](int32_t t) { done->tokens.push_back(t); };
    sink.on_done = [done](absl::Status s, FinishReason, int32_t generated) {
      done->status = std::move(s);
      done->generated = generated;
      done->notification.Notify();
    };
    Outcome out;
    out.started = node.Start(call, std::move(sink), cancel != nullptr ? *cancel : never);
    if (out.started.ok()) {
      EXPECT_TRUE(done->notification.WaitForNotificationWithTimeout(kBound));
      out.done = done->status;
      out.generated = done->generated;
      out.tokens = done->tokens;
    }
    return out;
  }

  // Every block back on the node (the engine frees a finished request's blocks on its thread).
  void ExpectAllBlocksFree(const DecodeNode& node) {
    EXPECT_TRUE(WaitFor([&] { return node.free_blocks() == kBlocks; }))
        << node.free_blocks() << " of " << kBlocks << " blocks free";
  }

  inline static std::string* model_path_ = nullptr;
  int64_t pull_chunk_bytes_ = DecodeNodeOptions().pull_chunk_bytes;  // for NewNode
  int32_t vocab_ = 0;
  FakeKvNetwork net_;
  std::shared_ptr<FakePrefill> prefill_ = std::make_shared<FakePrefill>(kLease);
  std::vector<std::unique_ptr<FakeKvSource>> sources_;  // [fast, slow]
};

}  // namespace tandem::testing
