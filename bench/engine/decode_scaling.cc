// decode_scaling: decode step time and per-rank KV bytes at long context for dcp = 1, 2, 4 on a
// synthetic model (8 query heads, 2 KV heads, tp = 8 so each KV head has 4 replicas and DCP 4 is
// valid). The prompt is prefilled through the real path (chunked, DCP-aware), then decode steps
// are timed. Per-rank KV bytes are the blocks one rank holds × its block size.
// Last line: RESULT dcp4_kv_bytes_ratio=<per-rank KV bytes at dcp 4 ÷ dcp 1> (goal <= 0.26).
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "engine/instance.h"
#include "model/format/model_loader.h"
#include "model/tools/synthetic_model.h"

ABSL_FLAG(int32_t, context, 16384, "prompt tokens before decoding");
ABSL_FLAG(int32_t, steps, 16, "timed decode steps");
ABSL_FLAG(int32_t, batch, 1, "sequences decoded together");
ABSL_FLAG(int32_t, layers, 2, "synthetic model layers");
ABSL_FLAG(int32_t, head_dim, 64, "synthetic model head_dim");

namespace tandem {
namespace {

int Main() {
  SyntheticModelOptions so;
  so.layers = absl::GetFlag(FLAGS_layers);
  so.head_dim = absl::GetFlag(FLAGS_head_dim);
  so.q_heads = 8;
  so.kv_heads = 2;
  so.hidden = 512;
  so.intermediate = 1024;
  so.context = absl::GetFlag(FLAGS_context) + absl::GetFlag(FLAGS_steps) + 16;
  const std::string path = "/tmp/tandem-decode-scaling.gguf";
  if (absl::Status s = WriteSyntheticModel(so, path); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  absl::StatusOr<LoadedModel> model = LoadModel(path, LoadOptions{[](absl::string_view) {}, true});
  std::remove(path.c_str());
  if (!model.ok()) return 1;
  const int32_t ctx = absl::GetFlag(FLAGS_context), steps = absl::GetFlag(FLAGS_steps),
                batch = absl::GetFlag(FLAGS_batch);
  std::printf(
      "synthetic model: %d layers, 8 q heads, 2 KV heads, head_dim %d; context %d, batch %d, tp "
      "8\n",
      so.layers, so.head_dim, ctx, batch);
  std::printf("%4s %14s %16s %14s\n", "dcp", "step ms", "KV bytes/rank", "vs dcp 1");
  double kv1 = 0, ratio4 = 0;
  for (int32_t dcp : {1, 2, 4}) {
    InstanceOptions o;
    o.parallel = ParallelConfig{8, 1, dcp, 16, 1};
    o.kv_bytes_per_rank = int64_t{1} << 30;
    absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(model->weights, o);
    if (!inst.ok()) {
      std::fprintf(stderr, "%s\n", inst.status().ToString().c_str());
      return 1;
    }
    const int64_t v = int64_t{16} * dcp;
    const int32_t blocks_per_seq = static_cast<int32_t>((ctx + steps + 1 + v - 1) / v);
    std::mt19937_64 rng(3);
    std::vector<std::vector<int32_t>> tables(batch);
    for (int32_t r = 0; r < batch; ++r) {
      for (int32_t b = 0; b < blocks_per_seq; ++b) tables[r].push_back(r * blocks_per_seq + b);
    }
    // Prefill in chunks of 2048 tokens (the engine's default step budget).
    for (int32_t start = 0; start < ctx; start += 2048) {
      StepInput step;
      for (int32_t r = 0; r < batch; ++r) {
        std::vector<int32_t> toks(std::min(2048, ctx - start));
        for (int32_t& t : toks) t = static_cast<int32_t>(rng() % 300);
        step.requests.push_back({start, toks, tables[r], false});
      }
      if (!(*inst)->Run(step).ok()) return 1;
    }
    double total = 0;
    for (int32_t s = -1; s < steps; ++s) {
      StepInput step;
      for (int32_t r = 0; r < batch; ++r)
        step.requests.push_back({ctx + s + 1, {5}, tables[r], true});
      const absl::Time t0 = absl::Now();
      if (!(*inst)->Run(step).ok()) return 1;
      if (s >= 0) total += absl::ToDoubleSeconds(absl::Now() - t0);
    }
    // Blocks a rank holds for these sequences × bytes of one block on one rank.
    const double kv = static_cast<double>(batch) *
                      VirtualBlocksFor(o.parallel.dcp_geometry(), ctx + steps + 1) *
                      (*inst)->block_bytes();
    if (dcp == 1) kv1 = kv;
    if (dcp == 4) ratio4 = kv / kv1;
    std::printf("%4d %14.2f %16.0f %14.3f\n", dcp, total / steps * 1e3, kv, kv / kv1);
  }
  std::printf("RESULT dcp4_kv_bytes_ratio=%.3f\n", ratio4);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::Main();
}
