// The engine's padded steps (ComputeBackend::PaddedRows, used by the CUDA backend's graphs to
// run every batch size in a captured bucket): a CPU backend that asks for padding to the next
// multiple of 4 rows must give the same logits as the plain CPU backend over prefill, batched
// decode and later steps — padding rows (token 0, position −1, KV slot −1, gather index −1)
// read nothing, write no KV and never reach the logits. A padding row that wrote KV or was
// gathered into the logits changes them by O(1). On tp = 2 every rank pads (without PCP/DCP all
// TP ranks run every row), through the all-reduces and the logits' all-gather.
//
// Tolerance 1e-5 absolute, as tests/engine/forward_test.cc's BatchedDecodeEqualsEachAlone: the
// GEMMs run over more rows, which may change oneDNN's blocking and so fp32 summation order.
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

// The CPU backend, asking the engine to pad steps to multiples of 4 rows.
class PaddingBackend final : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  int64_t PaddedRows(int64_t rows) const override { return (rows + 3) / 4 * 4; }
  int64_t padded_steps() const { return padded_steps_; }
  void BeginForward(int64_t rows) override {
    if (rows % 4 == 0) ++padded_steps_;
    ForwardingBackend::BeginForward(rows);
  }

 private:
  int64_t padded_steps_ = 0;
};

// padding: null for the plain CPU backend, else one PaddingBackend per rank (filled in).
std::unique_ptr<Instance> Make(const LlamaWeights& w, int32_t tp,
                               std::vector<PaddingBackend*>* padding) {
  InstanceOptions o;
  o.parallel.block_size = 4;
  o.parallel.tp = tp;
  o.kv_bytes_per_rank = int64_t{8} << 20;
  o.threads_per_rank = 1;
  if (padding != nullptr) {
    padding->assign(tp, nullptr);  // each rank thread writes its own slot
    o.make_backend = [padding](int32_t rank) -> absl::StatusOr<std::unique_ptr<ComputeBackend>> {
      auto b = std::make_unique<PaddingBackend>(CreateCpuBackend());
      (*padding)[rank] = b.get();
      return std::unique_ptr<ComputeBackend>(std::move(b));
    };
  }
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(w, o);
  EXPECT_TRUE(inst.ok()) << inst.status();
  return inst.ok() ? std::move(inst).value() : nullptr;
}

// tp = 2: TP ranks run every row, so they pad too (collectives over the padded rows; the
// logits' all-gather takes the real rows of each rank's vocab slice).
class PaddedRowsTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(PaddedRowsTest, PaddedStepsGiveTheSameLogits) {
  const int32_t tp = GetParam();
  const LlamaConfig c = testing::SmallConfig();
  const LlamaWeights w = testing::RandomWeights(c, 5);
  std::vector<PaddingBackend*> padding;
  std::unique_ptr<Instance> plain = Make(w, tp, nullptr);
  std::unique_ptr<Instance> padded = Make(w, tp, &padding);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(padded, nullptr);
  ASSERT_EQ(padding.size(), static_cast<size_t>(tp));

  std::mt19937_64 rng(9);
  const auto token = [&] { return static_cast<int32_t>(rng() % c.vocab_size); };
  // Three requests with disjoint block tables; prompts of 5, 2 and 7 tokens (prefill of 14 rows,
  // padded to 16), then decode steps of 3 rows (padded to 4) and of 1 row (padded to 4).
  const std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}};
  std::vector<StepInput> steps = testing::PrefillThenDecodeSteps(
      tables, {5, 2, 7}, 4, token, [](int s, size_t r) { return s == 3 && r != 1; });
  for (size_t i = 0; i < steps.size(); ++i) {
    absl::StatusOr<std::vector<float>> want = plain->Run(steps[i]);
    absl::StatusOr<std::vector<float>> got = padded->Run(steps[i]);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want->size()) << "step " << i;
    for (size_t j = 0; j < want->size(); ++j) {
      ASSERT_NEAR((*got)[j], (*want)[j], 1e-5) << "step " << i << " logit " << j;
    }
  }
  for (const PaddingBackend* p : padding) {
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->padded_steps(), static_cast<int64_t>(steps.size()))
        << "every step ran on a multiple of 4 rows";
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, PaddedRowsTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace tandem
