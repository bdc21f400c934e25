// Mismatched prefill/decode layouts through a real cluster (router + prefill + decode processes,
// KV pulled over UCX), with and without host-mirror staging of the pools: each pair's greedy
// output must equal the single-rank combined run, and so must a seeded request with every
// sampler field (penalties see the prompt on the prefill node and the decode node alike) whose
// logprobs match the reference's logits.
#include <random>

#include "gtest/gtest.h"
#include "model/logprobs.h"
#include "proto/convert/sampling_proto.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

constexpr int32_t kMaxTokens = 8;

struct Pair {
  const char* name;
  std::vector<std::string> prefill;
  std::vector<std::string> decode;
};

std::vector<std::vector<int32_t>> Prompts() {
  // Lengths straddle block boundaries of every block size and DCP degree used below.
  std::vector<std::vector<int32_t>> out;
  std::mt19937_64 rng(5);
  for (int n : {1, 7, 33, 70}) {
    std::vector<int32_t> p(n);
    for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % 250);
    out.push_back(p);
  }
  return out;
}

// Every sampler field at once; negative output penalties at a high temperature make the draws
// depend on the output history.
SamplingParams Penalised() {
  SamplingParams s;
  s.temperature = 2.5f;
  s.seed = 2024;
  s.top_k = 40;
  s.top_p = 0.95f;
  s.min_p = 0.02f;
  s.repetition_penalty = 1.3f;
  s.presence_penalty = -1.5f;
  s.frequency_penalty = -0.5f;
  s.logit_bias = {{9, 2.f}, {40, -3.f}};
  s.min_tokens = 3;
  s.logprobs = 2;
  return s;
}
constexpr int32_t kSampledTokens = 12;

class LayoutMatrixTest : public ::testing::TestWithParam<Pair> {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(SyntheticModelPath());
    reference_ =
        new std::vector<std::vector<int32_t>>(ReferenceGreedy(*model_, Prompts(), kMaxTokens));
    sampled_ =
        new ReferenceRun(ReferenceSampled(*model_, Prompts()[2], Penalised(), kSampledTokens));
  }
  static std::string* model_;
  static std::vector<std::vector<int32_t>>* reference_;
  static ReferenceRun* sampled_;
};
std::string* LayoutMatrixTest::model_ = nullptr;
std::vector<std::vector<int32_t>>* LayoutMatrixTest::reference_ = nullptr;
ReferenceRun* LayoutMatrixTest::sampled_ = nullptr;

TEST_P(LayoutMatrixTest, GreedyOutputEqualsSingleRankRun) {
  const Pair& pair = GetParam();
  ClusterSpec spec;
  spec.model_path = *model_;
  spec.prefill = {NodeSpec{pair.prefill}};
  spec.decode = {NodeSpec{pair.decode}};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const auto prompts = Prompts();
  ASSERT_EQ(reference_->size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    v1::GenerateRequest req;
    for (int32_t t : prompts[i]) req.mutable_token_ids()->add_ids(t);
    req.set_max_tokens(kMaxTokens);
    req.set_ignore_eos(true);
    const GenerateOutcome out = (*cluster)->Generate(req, absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << pair.name << ": " << out.status.error_message() << "\n"
                                 << (*cluster)->LogTails();
    EXPECT_EQ(out.tokens, (*reference_)[i]) << pair.name << " prompt length " << prompts[i].size();
    EXPECT_EQ(out.final.finish_reason(), "length");
  }
  // Seeded and penalised: the first token sampled on the prefill node, the rest on the decode
  // node from the KV's context ids; logprobs from each node's own logits.
  v1::GenerateRequest req;
  for (int32_t t : prompts[2]) req.mutable_token_ids()->add_ids(t);
  req.set_max_tokens(kSampledTokens);
  req.set_ignore_eos(true);
  *req.mutable_sampling() = ToProto(Penalised());
  const GenerateOutcome out = (*cluster)->Generate(req, absl::Seconds(60));
  ASSERT_TRUE(out.status.ok()) << pair.name << ": " << out.status.error_message();
  EXPECT_EQ(out.tokens, sampled_->tokens) << pair.name << " (penalised)";
  ASSERT_EQ(out.logprobs.size(), out.tokens.size());
  for (size_t i = 0; i < out.tokens.size() && i < sampled_->logits.size(); ++i) {
    const TokenLogprobs want = ComputeLogprobs(sampled_->logits[i], out.tokens[i], 2);
    EXPECT_NEAR(out.logprobs[i].logprob(), want.logprob, 1e-3) << pair.name << " token " << i;
    ASSERT_EQ(out.logprobs[i].top_ids_size(), 2);
    EXPECT_NEAR(out.logprobs[i].top_logprobs(0), want.top[0].second, 1e-3) << pair.name;
  }
  const absl::Status idle = (*cluster)->WaitIdle(absl::Seconds(10));
  EXPECT_TRUE(idle.ok()) << idle;
}

INSTANTIATE_TEST_SUITE_P(
    Pairs, LayoutMatrixTest,
    ::testing::Values(
        Pair{"same_layout", {"--tp=2"}, {"--tp=2"}},
        Pair{"dcp2_to_1", {"--tp=4", "--dcp=2"}, {"--tp=1"}},
        Pair{"dcp1_to_2", {"--tp=1"}, {"--tp=4", "--dcp=2"}},
        Pair{"dcp2_to_4", {"--tp=4", "--dcp=2"}, {"--tp=8", "--dcp=4"}},
        Pair{"dcp4_to_2", {"--tp=8", "--dcp=4"}, {"--tp=4", "--dcp=2"}},
        Pair{"dcp2_to_3", {"--tp=4", "--dcp=2"}, {"--tp=6", "--dcp=3"}},
        Pair{"head_split_tp1_to_tp2", {"--tp=1"}, {"--tp=2"}},
        Pair{"head_merge_tp4_to_tp1", {"--tp=4"}, {"--tp=1"}},
        Pair{"pcp2_dcp2_to_dcp2", {"--pcp=2", "--dcp=2"}, {"--tp=4", "--dcp=2"}},
        Pair{"block16_to_32", {"--tp=2", "--block_size=16"}, {"--tp=2", "--block_size=32"}},
        Pair{"interleave1_to_B",
             {"--tp=4", "--dcp=2", "--interleave=1"},
             {"--tp=4", "--dcp=2", "--interleave=16"}},
        // KV pools behind host mirrors, as on GPU instances (--kv_staging=always runs the same
        // copies on the CPU backend): on both sides, and on either side alone (mixed fleets).
        Pair{"staged_pcp2_dcp2_to_dcp2",
             {"--pcp=2", "--dcp=2", "--kv_staging=always"},
             {"--tp=4", "--dcp=2", "--kv_staging=always"}},
        Pair{"staged_prefill_tp2_to_tp1", {"--tp=2", "--kv_staging=always"}, {"--tp=1"}},
        Pair{"staged_decode_tp1_to_dcp2", {"--tp=1"}, {"--tp=4", "--dcp=2", "--kv_staging=always"}},
        // GPU-direct KV asked for where it cannot apply (CPU backend; Debian's UCX has no CUDA):
        // both nodes fall back to host pools and the transfer is the host one, tokens unchanged.
        Pair{"gpu_direct_fallback_tp2_to_tp1",
             {"--tp=2", "--kv_gpu_direct"},
             {"--tp=1", "--kv_gpu_direct"}}),
    [](const ::testing::TestParamInfo<Pair>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tandem::testing
