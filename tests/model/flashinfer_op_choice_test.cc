// ChooseFlashInferOp and MergeItemsPerBlock (model/cuda/flashinfer_op_choice.h): which backend
// ops run through FlashInfer, and the reason given for every case that keeps Tandem's kernel.
#include "model/cuda/flashinfer_op_choice.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/format/rope_scaling.h"

namespace tandem::gpu {
namespace {

FiOpRequest Norm(int64_t n, bool bf16 = false, int32_t alignment = 256) {
  FiOpRequest r;
  r.op = FiOp::kRmsNorm;
  r.cols = n;
  r.bf16 = bf16;
  r.alignment = alignment;
  return r;
}

FiOpRequest Rope(int64_t head_dim, int32_t heads, bool bf16 = false) {
  FiOpRequest r;
  r.op = FiOp::kRope;
  r.cols = head_dim;
  r.heads = heads;
  r.bf16 = bf16;
  return r;
}

FiOpRequest Correct(int64_t head_dim, bool bf16 = false) {
  FiOpRequest r;
  r.op = FiOp::kCorrectPartial;
  r.cols = head_dim;
  r.bf16 = bf16;
  return r;
}

void ExpectOurs(const FiOpChoice& c, const std::string& reason) {
  EXPECT_FALSE(c.flashinfer) << reason;
  EXPECT_EQ(c.reason, reason);
}

void ExpectFlashInfer(const FiOpChoice& c) {
  EXPECT_TRUE(c.flashinfer) << c.reason;
  EXPECT_EQ(c.reason, "");
}

TEST(FlashInferOpChoiceTest, NotSelectedKeepsOursWithoutAReason) {
  for (const FiOpRequest& r : {Norm(576), Rope(64, 9), Correct(128)}) {
    ExpectOurs(ChooseFlashInferOp(false, true, r), "");
    ExpectOurs(ChooseFlashInferOp(false, false, r), "");
  }
}

TEST(FlashInferOpChoiceTest, SelectedButNotBuiltSaysSo) {
  ExpectOurs(ChooseFlashInferOp(true, false, Norm(576)),
             "rmsnorm: FlashInfer is not built into this binary");
  ExpectOurs(ChooseFlashInferOp(true, false, Rope(64, 9)),
             "rope: FlashInfer is not built into this binary");
  ExpectOurs(ChooseFlashInferOp(true, false, Correct(128)),
             "dcp correction: FlashInfer is not built into this binary");
}

TEST(FlashInferOpChoiceTest, RmsNorm) {
  ExpectFlashInfer(ChooseFlashInferOp(true, true, Norm(576)));
  ExpectFlashInfer(ChooseFlashInferOp(true, true, Norm(4, false, 16)));
  ExpectOurs(ChooseFlashInferOp(true, true, Norm(578)),
             "rmsnorm: n 578 is not a positive multiple of 4");
  ExpectOurs(ChooseFlashInferOp(true, true, Norm(0)),
             "rmsnorm: n 0 is not a positive multiple of 4");
  ExpectOurs(ChooseFlashInferOp(true, true, Norm(576, false, 8)),
             "rmsnorm: a pointer is not 16-byte aligned");
  ExpectOurs(ChooseFlashInferOp(true, true, Norm(576, true)),
             "rmsnorm: bf16 activations (FlashInfer's RMSNorm takes the weight in the activation "
             "dtype; the norm weights are f32)");
}

TEST(FlashInferOpChoiceTest, AddRmsNormIsRmsNormsRulesAndInPlace) {
  FiOpRequest r = Norm(576);
  r.op = FiOp::kAddRmsNorm;
  ExpectFlashInfer(ChooseFlashInferOp(true, true, r));
  ExpectOurs(ChooseFlashInferOp(false, true, r), "");
  ExpectOurs(ChooseFlashInferOp(true, false, r),
             "add + rmsnorm: FlashInfer is not built into this binary");
  r.in_place = false;
  ExpectOurs(ChooseFlashInferOp(true, true, r),
             "add + rmsnorm: out is not x (FlashInfer's fused form writes in place)");
  r.in_place = true;
  r.cols = 578;
  ExpectOurs(ChooseFlashInferOp(true, true, r),
             "add + rmsnorm: n 578 is not a positive multiple of 4");
  r.cols = 576;
  r.alignment = 8;
  ExpectOurs(ChooseFlashInferOp(true, true, r), "add + rmsnorm: a pointer is not 16-byte aligned");
  r.alignment = 256;
  r.bf16 = true;
  ExpectOurs(ChooseFlashInferOp(true, true, r),
             "add + rmsnorm: bf16 activations (FlashInfer's RMSNorm takes the weight in the "
             "activation dtype; the norm weights are f32)");
}

TEST(FlashInferOpChoiceTest, Rope) {
  for (int64_t d : {64, 128, 256, 512}) {
    ExpectFlashInfer(ChooseFlashInferOp(true, true, Rope(d, 2)));
    ExpectFlashInfer(ChooseFlashInferOp(true, true, Rope(d, 9, /*bf16=*/true)));
  }
  ExpectOurs(ChooseFlashInferOp(true, true, Rope(96, 8)),
             "rope: head_dim 96 (64, 128, 256 or 512)");
  ExpectOurs(ChooseFlashInferOp(true, true, Rope(64, 1)), "rope: 1 head(s) (needs 2 or more)");
  FiOpRequest misaligned = Rope(64, 4);
  misaligned.alignment = 4;
  ExpectOurs(ChooseFlashInferOp(true, true, misaligned), "rope: x is not 16-byte aligned");
  FiOpRequest r = Rope(128, 8);
  r.mscale = 1.25f;
  ExpectOurs(ChooseFlashInferOp(true, true, r),
             "rope: mscale 1.25 (FlashInfer's RoPE has no magnitude factor)");
  const FiOpChoice plain = ChooseFlashInferOp(true, true, Rope(128, 8));
  EXPECT_FALSE(plain.rope.llama31);
  EXPECT_EQ(plain.rope.rope_scale, 1.f);
}

// rope_freq_factors: FlashInfer's RoPE runs them when its frequency scaling reproduces them
// (flashinfer_rope_fit.h; flashinfer_rope_fit_test checks the rotation), and the choice carries
// its arguments; otherwise Tandem's kernel, with the fit's reason.
TEST(FlashInferOpChoiceTest, RopeFrequencyFactors) {
  Llama3RopeScaling llama31;  // factor 8, low 1, high 4, original 8192
  absl::StatusOr<std::vector<float>> f = Llama3RopeFreqFactors(128, 500000.f, llama31);
  ASSERT_TRUE(f.ok()) << f.status();
  for (bool bf16 : {false, true}) {
    FiOpRequest r = Rope(128, 40, bf16);
    r.freq_factors = f->data();
    r.theta = 500000.f;
    const FiOpChoice c = ChooseFlashInferOp(true, true, r);
    ExpectFlashInfer(c);
    EXPECT_TRUE(c.rope.llama31);
    EXPECT_EQ(c.rope.rope_scale, 8.f);
    EXPECT_NEAR(c.rope.high_freq_factor, 4.f, 4e-4);
    EXPECT_NEAR(c.rope.old_context_length, 8192.f, 1.f);
    // The same divisors against another theta are not Llama 3's ramp for it.
    r.theta = 10000.f;
    const FiOpChoice other = ChooseFlashInferOp(true, true, r);
    EXPECT_FALSE(other.flashinfer);
    EXPECT_EQ(other.reason.rfind("rope: rope_freq_factors are not a ramp FlashInfer's RoPE can "
                                 "apply (Llama 3's or linear scaling): ",
                                 0),
              0u)
        << other.reason;
  }
  // Linear scaling: FlashInfer's rope_scale.
  const std::vector<float> linear(32, 2.5f);
  FiOpRequest r = Rope(64, 4);
  r.freq_factors = linear.data();
  FiOpChoice c = ChooseFlashInferOp(true, true, r);
  ExpectFlashInfer(c);
  EXPECT_FALSE(c.rope.llama31);
  EXPECT_EQ(c.rope.rope_scale, 2.5f);
  // YaRN: its divisors alone are refused, and so is its mscale.
  YarnRopeScaling yarn_scaling;
  absl::StatusOr<YarnRope> yarn = YarnRopeParams(64, 10000.f, yarn_scaling);
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  r.freq_factors = yarn->freq_factors.data();
  c = ChooseFlashInferOp(true, true, r);
  EXPECT_FALSE(c.flashinfer);
  EXPECT_EQ(c.reason.rfind("rope: rope_freq_factors are not a ramp", 0), 0u) << c.reason;
  r.mscale = yarn->mscale;
  ExpectOurs(
      ChooseFlashInferOp(true, true, r),
      absl::StrCat("rope: mscale ", yarn->mscale, " (FlashInfer's RoPE has no magnitude factor)"));
  // Shape rules come first: an unsupported head_dim is named whatever the divisors.
  r = Rope(96, 4);
  r.freq_factors = linear.data();
  ExpectOurs(ChooseFlashInferOp(true, true, r), "rope: head_dim 96 (64, 128, 256 or 512)");
}

TEST(FlashInferOpChoiceTest, CorrectPartial) {
  for (int64_t d : {64, 128, 256, 512})
    ExpectFlashInfer(ChooseFlashInferOp(true, true, Correct(d)));
  ExpectOurs(ChooseFlashInferOp(true, true, Correct(80)),
             "dcp correction: head_dim 80 (64, 128, 256 or 512)");
  ExpectOurs(ChooseFlashInferOp(true, true, Correct(128, true)),
             "dcp correction: bf16 activations");
}

TEST(FlashInferOpChoiceTest, MergeItemsPerBlockDividesItems) {
  EXPECT_EQ(MergeItemsPerBlock(0), 1);
  EXPECT_EQ(MergeItemsPerBlock(1), 1);
  EXPECT_EQ(MergeItemsPerBlock(6), 2);
  EXPECT_EQ(MergeItemsPerBlock(12), 4);
  EXPECT_EQ(MergeItemsPerBlock(24), 8);
  EXPECT_EQ(MergeItemsPerBlock(9 * 16), 16);
  EXPECT_EQ(MergeItemsPerBlock(1 << 20), 16);
  for (int64_t items = 1; items < 200; ++items) {
    const int32_t g = MergeItemsPerBlock(items);
    EXPECT_EQ(items % g, 0) << items;
    EXPECT_LE(g, 16);
    EXPECT_TRUE(g == 16 || items % (2 * g) != 0) << items << " could use " << 2 * g;
  }
}

}  // namespace
}  // namespace tandem::gpu
