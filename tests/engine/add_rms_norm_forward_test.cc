// The forward's fused residual add + RMSNorm (ComputeBackend::AddRmsNorm, PrefersAddRmsNorm): a
// backend that prefers it gets each residual projection followed by a norm as Linear +
// AddRmsNorm — the O projection with the FFN norm, the down projection with the next layer's
// attention norm (not the last layer's: the output norm runs on the gathered logit rows) — and
// the normed rows from AddRmsNorm's output. With the CPU backend's default AddRmsNorm (Add, then
// RmsNorm) and its GEMM epilogues off (LinearAdd = Linear + Add), that is the same arithmetic
// as the plain forward, so the logits must be bit-identical; a forward that normed the wrong
// buffer, skipped the add or read a stale normed input changes them by far more than one ulp.
#include <cstring>
#include <random>
#include <vector>

#include "engine/instance.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_backend.h"
#include "tests/engine/forwarding_backend.h"
#include "tests/engine/step_script.h"
#include "tests/engine/test_model.h"

namespace tandem {
namespace {

// The CPU backend, asking for the fused add + RMSNorm and counting its calls; the add + norm
// itself is ComputeBackend's default.
class AddNormBackend final : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  bool PrefersAddRmsNorm() const override { return true; }
  absl::Status AddRmsNorm(float* residual, const float* x, const float* w, int64_t m, int64_t n,
                          float eps, float* out) override {
    ++calls_;
    return ComputeBackend::AddRmsNorm(residual, x, w, m, n, eps, out);
  }
  int64_t calls() const { return calls_; }

 private:
  int64_t calls_ = 0;
};

std::unique_ptr<Instance> Make(const LlamaWeights& w, AddNormBackend** fused) {
  InstanceOptions o;
  o.parallel.block_size = 4;
  o.kv_bytes_per_rank = int64_t{8} << 20;
  o.threads_per_rank = 1;
  if (fused != nullptr) {
    o.make_backend = [fused](int32_t) -> absl::StatusOr<std::unique_ptr<ComputeBackend>> {
      auto b = std::make_unique<AddNormBackend>(CreateCpuBackend());
      *fused = b.get();
      return std::unique_ptr<ComputeBackend>(std::move(b));
    };
  }
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(w, o);
  EXPECT_TRUE(inst.ok()) << inst.status();
  return inst.ok() ? std::move(inst).value() : nullptr;
}

class AddRmsNormForwardTest : public ::testing::Test {
 protected:
  void SetUp() override { SetCpuEpilogueFusion(false); }
  void TearDown() override { SetCpuEpilogueFusion(true); }
};

TEST_F(AddRmsNormForwardTest, FusedAddNormGivesBitIdenticalLogits) {
  const LlamaConfig c = testing::SmallConfig();
  ASSERT_GE(c.num_layers, 2) << "the down projection + next attention norm needs two layers";
  const LlamaWeights w = testing::RandomWeights(c, 11);
  AddNormBackend* fused = nullptr;
  std::unique_ptr<Instance> plain = Make(w, nullptr);
  std::unique_ptr<Instance> with_fused = Make(w, &fused);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(with_fused, nullptr);
  ASSERT_NE(fused, nullptr);

  std::mt19937_64 rng(3);
  const auto token = [&] { return static_cast<int32_t>(rng() % c.vocab_size); };
  // Two requests: a prefill of 6 + 3 rows, then three batched decode steps.
  const std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  std::vector<StepInput> steps = testing::PrefillThenDecodeSteps(tables, {6, 3}, 3, token);
  for (size_t i = 0; i < steps.size(); ++i) {
    absl::StatusOr<std::vector<float>> want = plain->Run(steps[i]);
    absl::StatusOr<std::vector<float>> got = with_fused->Run(steps[i]);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want->size()) << "step " << i;
    for (size_t j = 0; j < want->size(); ++j) {
      ASSERT_EQ(std::memcmp(&(*got)[j], &(*want)[j], sizeof(float)), 0)
          << "step " << i << " logit " << j << ": " << (*got)[j] << " vs " << (*want)[j];
    }
  }
  // Per step: the O projection of every layer and the down projection of all but the last.
  EXPECT_EQ(fused->calls(), static_cast<int64_t>(steps.size()) * (2 * c.num_layers - 1));
}

}  // namespace
}  // namespace tandem
