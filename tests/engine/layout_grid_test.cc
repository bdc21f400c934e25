// Every valid TP × PCP × DCP layout (with block sizes and interleaves) generates the same greedy
// tokens as the single-rank instance, with logits within a stated tolerance, for prompts of length
// 1, < B, exactly B·dcp and longer than max_prefill_tokens, batched together.
#include <cmath>
#include <map>
#include <random>

#include "absl/synchronization/notification.h"
#include "engine/combined_engine.h"
#include "gtest/gtest.h"
#include "model/format/rope_scaling.h"
#include "tests/engine/generate_all.h"
#include "tests/engine/test_model.h"

namespace tandem {
namespace {

using testing::RandomWeights;
using testing::SmallConfig;

// Sharding changes only float summation order (TP all-reduce partial sums, LSE merges): observed
// differences are ~1e-6 of the logit scale; 1e-4 is far below what any indexing bug produces.
constexpr double kLogitTolerance = 1e-4;
constexpr int32_t kMaxPrefillTokens = 24;
constexpr int32_t kNewTokens = 4;

struct GenRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

std::vector<int32_t> Prompt(int32_t n, int32_t vocab) {
  std::mt19937_64 rng(1000 + n);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % vocab);
  return p;
}

// Generates greedily for all prompts at once on an instance with `parallel`.
std::vector<GenRun> Generate(const LlamaWeights& w, const ParallelConfig& parallel,
                             const std::vector<std::vector<int32_t>>& prompts) {
  InstanceOptions o;
  o.parallel = parallel;
  o.kv_bytes_per_rank = int64_t{2} << 20;
  o.collective_timeout = absl::Seconds(60);
  auto inst = Instance::Create(w, o);
  EXPECT_TRUE(inst.ok()) << parallel.ToString() << ": " << inst.status();
  if (!inst.ok()) return {};
  CombinedEngine engine(inst->get(), PrefillOptions{kMaxPrefillTokens, 64, absl::Seconds(30)},
                        DecodeOptions{});
  std::vector<GenRun> out;
  for (absl::StatusOr<GenerateResult>& r : testing::GenerateAll(
           engine, testing::GreedyRequests(prompts, kNewTokens), absl::Seconds(120))) {
    EXPECT_TRUE(r.ok()) << parallel.ToString() << ": " << r.status();
    if (!r.ok()) return {};
    out.push_back({r->tokens, r->logits});
  }
  EXPECT_EQ(engine.blocks().free_blocks(), engine.blocks().total_blocks()) << "leaked blocks";
  return out;
}

struct Layout {
  int32_t tp, pcp, dcp, block_size, interleave;
};

std::vector<Layout> GridLayouts() {
  const ModelDims dims{2, 8, 2, 16};
  std::vector<Layout> out;
  int variant = 0;
  for (int32_t tp : {1, 2, 4, 8}) {
    for (int32_t pcp : {1, 2, 3, 4}) {
      for (int32_t dcp : ValidDcpValues(ParallelConfig{tp, pcp, 1, 16, 1}, dims)) {
        // Cycle (B, I) over {4,16} × {1, 2, B} so every combination of the grid axes appears
        // while the test stays within CI's budget (one run per (tp, pcp, dcp)).
        const int32_t b = (variant % 2 == 0) ? 4 : 16;
        const int32_t i_choice = (variant / 2) % 3;
        const int32_t interleave = i_choice == 0 ? 1 : (i_choice == 1 ? 2 : b);
        out.push_back({tp, pcp, dcp, b, interleave});
        ++variant;
      }
    }
  }
  return out;
}

TEST(LayoutGridTest, EveryValidLayoutMatchesTheSingleRankRun) {
  const LlamaConfig c = SmallConfig();
  const LlamaWeights w = RandomWeights(c, 77);
  std::map<std::vector<int32_t>, GenRun> reference;
  const std::vector<Layout> layouts = GridLayouts();
  ASSERT_GE(layouts.size(), 40u);
  for (const Layout& l : layouts) {
    const ParallelConfig p{l.tp, l.pcp, l.dcp, l.block_size, l.interleave};
    std::vector<std::vector<int32_t>> prompts = {
        Prompt(1, c.vocab_size), Prompt(l.block_size - 1, c.vocab_size),
        Prompt(l.block_size * l.dcp, c.vocab_size), Prompt(kMaxPrefillTokens + 13, c.vocab_size)};
    std::vector<std::vector<int32_t>> missing;
    for (const auto& pr : prompts) {
      if (!reference.count(pr)) missing.push_back(pr);
    }
    if (!missing.empty()) {
      const std::vector<GenRun> ref = Generate(w, ParallelConfig{}, missing);
      ASSERT_EQ(ref.size(), missing.size());
      for (size_t i = 0; i < missing.size(); ++i) reference[missing[i]] = ref[i];
    }
    const std::vector<GenRun> got = Generate(w, p, prompts);
    ASSERT_EQ(got.size(), prompts.size()) << p.ToString();
    for (size_t i = 0; i < prompts.size(); ++i) {
      const GenRun& want = reference[prompts[i]];
      EXPECT_EQ(got[i].tokens, want.tokens)
          << p.ToString() << " prompt length " << prompts[i].size();
      ASSERT_EQ(got[i].logits.size(), want.logits.size());
      for (size_t s = 0; s < want.logits.size(); ++s) {
        double scale = 1.0, diff = 0.0;
        for (size_t v = 0; v < want.logits[s].size(); ++v) {
          scale = std::max(scale, std::abs(static_cast<double>(want.logits[s][v])));
          diff = std::max(diff,
                          std::abs(static_cast<double>(got[i].logits[s][v]) - want.logits[s][v]));
        }
        EXPECT_LT(diff / scale, kLogitTolerance)
            << p.ToString() << " prompt length " << prompts[i].size() << " token " << s;
      }
    }
  }
}

// The architecture-specific pieces under head split, KV-head replication, PCP and DCP: Qwen2's QKV
// biases, Qwen3's per-head Q/K norms (replicated [head_dim] weights on every rank), Llama 3's
// RoPE frequency divisors and YaRN's divisors and magnitude. A subset of the grid per architecture
// keeps CI time small; each layout must reproduce the single-rank tokens and logits.
TEST(LayoutGridTest, ArchitectureFeaturesMatchTheSingleRankRunUnderSplits) {
  struct Arch {
    const char* name;
    LlamaConfig config;
  };
  std::vector<Arch> archs;
  LlamaConfig qwen2 = SmallConfig();
  qwen2.architecture = "qwen2";
  qwen2.rope_style = RopeStyle::kRotateHalf;
  qwen2.has_qkv_bias = true;
  qwen2.tied_embeddings = true;
  archs.push_back({"qwen2", qwen2});
  LlamaConfig qwen3 = SmallConfig();
  qwen3.architecture = "qwen3";
  qwen3.rope_style = RopeStyle::kRotateHalf;
  qwen3.has_qk_norm = true;
  archs.push_back({"qwen3", qwen3});
  LlamaConfig llama3 = SmallConfig();
  for (int32_t i = 0; i < llama3.head_dim / 2; ++i) {
    llama3.rope_freq_factors.push_back(i < 2 ? 1.f : (i < 4 ? 2.5f : 8.f));
  }
  archs.push_back({"llama3-rope", llama3});
  // YaRN on a Qwen2-style model: blended divisors and the cos/sin magnitude (q·k scaled by its
  // square) on every rank.
  LlamaConfig yarn = qwen2;
  absl::StatusOr<YarnRope> yarn_rope =
      YarnRopeParams(yarn.head_dim, yarn.rope_theta, YarnRopeScaling{4.f, 8});
  ASSERT_TRUE(yarn_rope.ok()) << yarn_rope.status();
  yarn.rope_freq_factors = yarn_rope->freq_factors;
  yarn.rope_mscale = yarn_rope->mscale;
  archs.push_back({"qwen2-yarn", yarn});
  const std::vector<Layout> layouts = {{2, 1, 1, 4, 1},    // head split
                                       {4, 1, 2, 16, 2},   // KV heads replicated, DCP
                                       {1, 2, 1, 4, 4},    // PCP
                                       {2, 2, 2, 16, 1}};  // TP x PCP x DCP
  for (const Arch& arch : archs) {
    const LlamaWeights w = RandomWeights(arch.config, 91);
    for (const Layout& l : layouts) {
      const ParallelConfig p{l.tp, l.pcp, l.dcp, l.block_size, l.interleave};
      const std::vector<std::vector<int32_t>> prompts = {
          Prompt(l.block_size * l.dcp + 1, arch.config.vocab_size),
          Prompt(kMaxPrefillTokens + 5, arch.config.vocab_size)};
      const std::vector<GenRun> want = Generate(w, ParallelConfig{}, prompts);
      const std::vector<GenRun> got = Generate(w, p, prompts);
      ASSERT_EQ(want.size(), prompts.size()) << arch.name;
      ASSERT_EQ(got.size(), prompts.size()) << arch.name << " " << p.ToString();
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << arch.name << " " << p.ToString();
        ASSERT_EQ(got[i].logits.size(), want[i].logits.size());
        for (size_t s = 0; s < want[i].logits.size(); ++s) {
          double scale = 1.0, diff = 0.0;
          for (size_t v = 0; v < want[i].logits[s].size(); ++v) {
            scale = std::max(scale, std::abs(static_cast<double>(want[i].logits[s][v])));
            diff = std::max(
                diff, std::abs(static_cast<double>(got[i].logits[s][v]) - want[i].logits[s][v]));
          }
          EXPECT_LT(diff / scale, kLogitTolerance) << arch.name << " " << p.ToString();
        }
      }
    }
  }
}

// Per-rank KV bytes for the same requests scale as 1/dcp.
TEST(LayoutGridTest, PerRankKvBytesScaleAsOneOverDcp) {
  const LlamaWeights w = RandomWeights(SmallConfig(), 3);
  std::map<int32_t, int64_t> bytes;
  for (int32_t dcp : {1, 2, 4}) {
    InstanceOptions o;
    o.parallel = ParallelConfig{8, 1, dcp, 16, 1};
    o.kv_bytes_per_rank = int64_t{4} << 20;
    auto inst = Instance::Create(w, o);
    ASSERT_TRUE(inst.ok()) << inst.status();
    BlockManager blocks((*inst)->num_blocks());
    PrefillEngine prefill(inst->get(), &blocks, PrefillOptions{});
    absl::Notification done;
    PrefillJob req;
    req.prompt = Prompt(512, SmallConfig().vocab_size);
    absl::StatusOr<PrefillResult> result = absl::UnknownError("pending");
    ASSERT_TRUE(prefill
                    .Submit(req,
                            [&](absl::StatusOr<PrefillResult> r) {
                              result = std::move(r);
                              done.Notify();
                            })
                    .ok());
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    ASSERT_TRUE(result.ok()) << result.status();
    bytes[dcp] = (blocks.total_blocks() - blocks.free_blocks()) * (*inst)->block_bytes();
    ASSERT_TRUE(blocks.Free(result->block_table).ok());
  }
  EXPECT_EQ(bytes[2] * 2, bytes[1]);
  EXPECT_EQ(bytes[4] * 4, bytes[1]);
}

}  // namespace
}  // namespace tandem
