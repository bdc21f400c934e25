// A new architecture through real processes (issue 23 item 3): a synthetic Qwen3 model (per-head
// Q/K RMSNorm, rotate-half RoPE) with YaRN RoPE scaling (factor 4 over an original context of 32,
// so the longer prompts run past it), made by the same code as tandem-make-model, served by a
// router + prefill (TP 2: heads split) + decode (TP 1) cluster — a mismatched P/D layout, the KV
// re-sharded on the pull. Every request's greedy tokens must equal the single-rank in-process
// reference on the same file, and its text what the tandem-generate binary prints at TP 1.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

// stdout of `tandem-generate` (greedy, ignore_eos) at TP 1; bounded by timeout(1).
std::string TandemGenerate(const std::string& model, const std::vector<int32_t>& prompt,
                           int32_t max_tokens) {
  const std::string cmd =
      absl::StrCat("timeout 60 ", TANDEM_GENERATE_BIN, " --model=", model,
                   " --prompt_ids=", absl::StrJoin(prompt, ","), " --max_tokens=", max_tokens,
                   " --ignore_eos=true --tp=1 2>/dev/null");
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  if (pipe == nullptr) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << " exited " << status;
  return out;
}

TEST(NewArchitectureE2eTest, Qwen3YarnOnPrefillTp2DecodeTp1MatchesTandemGenerate) {
  SyntheticModelOptions o;
  o.arch = "qwen3";
  o.seed = 23;
  o.rope_scaling = SyntheticRopeScaling::kYarn;
  o.rope_scaling_factor = 4.f;
  o.rope_original_context = 32;
  const std::string model = WriteTempSyntheticModel(o, "qwen3_yarn.gguf");
  ASSERT_FALSE(model.empty());
  const std::vector<std::vector<int32_t>> prompts = {RandomPrompt(5, 1), RandomPrompt(40, 2),
                                                     RandomPrompt(61, 3)};
  const int32_t kTokens = 8;
  const std::vector<std::vector<int32_t>> reference = ReferenceGreedy(model, prompts, kTokens);
  ASSERT_EQ(reference.size(), prompts.size());

  ClusterSpec spec;
  spec.model_path = model;
  spec.prefill.push_back(NodeSpec{{"--tp=2"}});
  spec.decode.push_back(NodeSpec{{"--tp=1"}});
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("prompt of ", prompts[i].size(), " tokens"));
    const GenerateOutcome out =
        (*cluster)->Generate(IdsRequest(prompts[i], kTokens), absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << (*cluster)->LogTails();
    ASSERT_EQ(out.tokens.size(), static_cast<size_t>(kTokens));
    EXPECT_EQ(out.tokens, reference[i]);
    EXPECT_FALSE(out.text.empty());
    EXPECT_EQ(out.text + "\n", TandemGenerate(model, prompts[i], kTokens));
  }
  const absl::Status idle = (*cluster)->WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle;
}

}  // namespace
}  // namespace tandem::testing
