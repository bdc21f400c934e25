// A prefill node whose KV source publishes device pools (GPU-direct KV, docs/gpu.md#gpu-direct-kv)
// refuses to start with the features that read KV on the host — digests and the prefix cache's
// re-check — and starts with both off. The source is the in-process fake with its metadata
// labelled CUDA memory (host memory underneath: what matters here is the label).
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kv_transfer/fake/fake_kv_source.h"
#include "model/tools/synthetic_model.h"
#include "prefill_node/prefill_node.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

class DeviceLabelledSource final : public KvSource {
 public:
  explicit DeviceLabelledSource(std::unique_ptr<KvSource> inner)
      : inner_(std::move(inner)), metadata_(inner_->metadata()) {
    for (RankTransferInfo& r : metadata_.ranks) r.memory_type = KvMemoryType::kCuda;
  }
  const TransferMetadata& metadata() const override { return metadata_; }
  KvPoolMemory& pool(int32_t rank) const override { return inner_->pool(rank); }

 private:
  std::unique_ptr<KvSource> inner_;
  TransferMetadata metadata_;
};

class PrefillDevicePoolsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_path_ = new std::string(
        absl::StrCat(::testing::TempDir(), "/prefill_device_pools_test_", getpid(), ".gguf"));
    ASSERT_OK(WriteSyntheticModel(SyntheticModelOptions{}, *model_path_));
  }
  static void TearDownTestSuite() {
    std::remove(model_path_->c_str());
    delete model_path_;
  }

  absl::StatusOr<std::unique_ptr<PrefillNode>> Create(bool kv_digests, bool prefix_cache,
                                                      int32_t flip = 0) {
    PrefillNodeOptions o;
    o.model_path = *model_path_;
    o.advertised_address = "prefill:1";
    o.instance.parallel = ParallelConfig{2, 1, 1, 16, 16};
    o.instance.threads_per_rank = 1;
    o.instance.kv_bytes_per_rank = 1 << 20;
    o.kv_digests = kv_digests;
    o.prefix_cache = prefix_cache;
    o.testing_flip_kv_byte = flip;
    o.engine_id = absl::StrCat("p", next_engine_++);
    KvSourceFactory fake = fake::FakeSourceFactory(&net_);
    o.sources = [fake](const KvSourceOptions& so) -> absl::StatusOr<std::unique_ptr<KvSource>> {
      absl::StatusOr<std::unique_ptr<KvSource>> inner = fake(so);
      if (!inner.ok()) return inner.status();
      return std::unique_ptr<KvSource>(new DeviceLabelledSource(*std::move(inner)));
    };
    return PrefillNode::Create(o);
  }

  static std::string* model_path_;
  fake::FakeKvNetwork net_;
  int next_engine_ = 0;
};

std::string* PrefillDevicePoolsTest::model_path_ = nullptr;

TEST_F(PrefillDevicePoolsTest, RefusesWhatReadsKvOnTheHost) {
  for (const auto& [digests, prefix, flip] :
       {std::tuple{true, false, 0}, std::tuple{false, true, 0}, std::tuple{false, false, 1}}) {
    SCOPED_TRACE(absl::StrCat("digests ", digests, " prefix cache ", prefix, " flip ", flip));
    EXPECT_THAT(Create(digests, prefix, flip),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("device KV pools (--kv_gpu_direct) cannot be read on the host: "
                                   "start tandem-prefill with --kv_digests=false and "
                                   "--prefix_cache=false")));
  }
}

TEST_F(PrefillDevicePoolsTest, StartsWithBothOff) {
  absl::StatusOr<std::unique_ptr<PrefillNode>> node = Create(false, false);
  ASSERT_OK(node);
  for (const RankTransferInfo& r : (*node)->metadata().ranks) {
    EXPECT_EQ(r.memory_type, KvMemoryType::kCuda);
  }
}

}  // namespace
}  // namespace tandem::testing
