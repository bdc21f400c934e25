// Disaggregated serving on a GPU (label cuda; skipped with the reason when no GPU is usable):
// tandem-prefill and tandem-decode with --backend cuda keep their KV pools in device memory and
// transfer through host mirrors (docs/gpu.md). Their greedy output must equal an in-process GPU
// combined instance's token for token: the GEMMs and kernels are the same, and staging and
// transfer copy bytes exactly. (Against the CPU the bf16 GEMMs would differ by rounding; the
// staging copies themselves are tested on the CPU by the layout matrix's --kv_staging=always
// cases.)
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

constexpr int32_t kMaxTokens = 8;

// head_dim 64, the CUDA kernels' common case; 2 KV heads so tp=2 is valid on two GPUs.
std::string GpuModelPath() {
  SyntheticModelOptions o;
  o.seed = 11;
  o.hidden = 256;
  o.q_heads = 4;
  o.kv_heads = 2;
  o.head_dim = 64;
  o.intermediate = 512;
  return WriteTempSyntheticModel(o, "gpu-synthetic.gguf");
}

class GpuClusterTest : public CudaTest {};

TEST_F(GpuClusterTest, GpuPrefillToGpuDecodeEqualsTheGpuCombinedRun) {
  const std::string model = GpuModelPath();
  std::vector<std::vector<int32_t>> prompts;
  std::mt19937_64 rng(3);
  for (int n : {1, 7, 33, 70}) {
    std::vector<int32_t> p(n);
    for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % 250);
    prompts.push_back(p);
  }
  const std::vector<std::vector<int32_t>> reference =
      ReferenceGreedy(model, prompts, kMaxTokens, "cuda");
  ASSERT_EQ(reference.size(), prompts.size());

  ClusterSpec spec;
  spec.model_path = model;
  spec.prefill = {NodeSpec{{"--backend=cuda"}}};
  spec.decode = {NodeSpec{{"--backend=cuda"}}};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  for (size_t i = 0; i < prompts.size(); ++i) {
    v1::GenerateRequest req;
    for (int32_t t : prompts[i]) req.mutable_token_ids()->add_ids(t);
    req.set_max_tokens(kMaxTokens);
    req.set_ignore_eos(true);
    const GenerateOutcome out = (*cluster)->Generate(req, absl::Seconds(120));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << (*cluster)->LogTails();
    EXPECT_EQ(out.tokens, reference[i]) << "prompt length " << prompts[i].size();
  }
  const absl::Status idle = (*cluster)->WaitIdle(absl::Seconds(10));
  EXPECT_TRUE(idle.ok()) << idle;
}

}  // namespace
}  // namespace tandem::testing
