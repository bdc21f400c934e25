// decode_scaling: what decode context parallelism buys, measured on running instances of a
// synthetic model (8 query heads, 2 KV heads, tp = 8 so each KV head has 4 replicas and DCP 4
// is valid; docs/design.md#dcp-groups).
//
// 1. Capacity. For dcp = 1, 2, 4 an instance is created with the same per-rank KV budget
//    (--capacity_kv_mib) and its prefill engine is fed identical prompts of --capacity_prompt
//    tokens, one after another, each holding its blocks, until admission fails
//    (RESOURCE_EXHAUSTED). Every admitted prompt is really prefilled into the pools; then one
//    decode step over all of them reads their whole KV back, and its greedy tokens must equal the
//    dcp = 1 instance's for the prompts both admitted (else the run fails). Tokens admitted at
//    dcp 4 ÷ at dcp 1 is the capacity ratio: a layout that stored every token on every rank of a
//    DCP group would admit no more at dcp 4 than at dcp 1 (ratio 1).
// 2. Step time. Decode steps at --context tokens (prefilled through the real chunked path) are
//    timed at each dcp; the dcp 4 ÷ dcp 1 step time is printed.
//
// RESULT dcp4_capacity_ratio=<tokens admitted at dcp 4 ÷ at dcp 1> (goal >= 3.9)
// RESULT dcp4_step_time_ratio=<decode step time at dcp 4 ÷ dcp 1 at --context tokens>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/block_manager.h"
#include "engine/instance.h"
#include "engine/prefill_engine.h"
#include "model/format/model_loader.h"
#include "model/sampling.h"
#include "model/tools/synthetic_model.h"

ABSL_FLAG(int32_t, context, 16384, "prompt tokens before the timed decode steps");
ABSL_FLAG(int32_t, steps, 16, "timed decode steps");
ABSL_FLAG(int32_t, layers, 2, "synthetic model layers");
ABSL_FLAG(int32_t, head_dim, 64, "synthetic model head_dim");
ABSL_FLAG(int32_t, capacity_kv_mib, 16, "per-rank KV budget of the capacity instances, MiB");
// 2047 + the one reserved decode position = 2048 tokens: whole blocks at every dcp, so the
// ratio measures the layout, not the rounding of the last block.
ABSL_FLAG(int32_t, capacity_prompt, 2047, "prompt tokens of each capacity request");
ABSL_FLAG(int32_t, max_requests, 4096, "safety cap on capacity requests per instance");

namespace tandem {
namespace {

constexpr int32_t kTp = 8;
constexpr int32_t kBlock = 16;
constexpr absl::Duration kPrefillWait = absl::Minutes(10);

struct Capacity {
  int64_t tokens = 0;  // prompt tokens admitted and prefilled
  int32_t requests = 0;
  int32_t blocks = 0;                // virtual blocks of the instance
  std::vector<int32_t> next_tokens;  // greedy token after each admitted prompt (decode step)
  std::string stop;                  // why admission ended
};

std::vector<int32_t> Prompt(int32_t index, int32_t length) {
  std::mt19937_64 rng(1000 + index);
  std::vector<int32_t> p(length);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % 300);
  return p;
}

absl::StatusOr<Capacity> MeasureCapacity(const LlamaWeights& weights, int32_t dcp) {
  InstanceOptions o;
  o.parallel = ParallelConfig{kTp, 1, dcp, kBlock, 1};
  o.kv_bytes_per_rank = int64_t{absl::GetFlag(FLAGS_capacity_kv_mib)} << 20;
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(weights, o);
  if (!inst.ok()) return inst.status();
  BlockManager blocks((*inst)->num_blocks());
  Capacity cap;
  cap.blocks = (*inst)->num_blocks();
  std::vector<StepRequest> decode;  // one decode position per admitted prompt
  {
    PrefillOptions po;
    po.queue_timeout = absl::Milliseconds(200);  // admission fails fast once the pools are full
    PrefillEngine engine(inst->get(), &blocks, po);
    const int32_t length = absl::GetFlag(FLAGS_capacity_prompt);
    for (int32_t i = 0; i < absl::GetFlag(FLAGS_max_requests); ++i) {
      PrefillJob req;
      req.id = absl::StrCat("fill-", i);
      req.prompt = Prompt(i, length);
      req.reserve_tokens = 1;  // room for the decode step's token
      absl::Notification done;
      absl::StatusOr<PrefillResult> result = absl::UnknownError("no result");
      const absl::Status submitted = engine.Submit(req, [&](absl::StatusOr<PrefillResult> r) {
        result = std::move(r);
        done.Notify();
      });
      if (!submitted.ok()) {
        cap.stop = submitted.ToString();
        break;
      }
      if (!done.WaitForNotificationWithTimeout(kPrefillWait)) {
        return absl::DeadlineExceededError(absl::StrCat("prefill ", i, " took over 10 minutes"));
      }
      if (absl::IsResourceExhausted(result.status())) {
        cap.stop = result.status().ToString();
        break;
      }
      if (!result.ok()) return result.status();
      cap.tokens += result->num_tokens;
      ++cap.requests;
      decode.push_back({result->num_tokens, {result->first_token}, result->block_table, true});
    }
  }
  if (cap.requests == 0) return absl::FailedPreconditionError("no request was admitted");
  // Read every admitted prompt's KV back: one batched decode step.
  for (size_t start = 0; start < decode.size(); start += 64) {
    StepInput step;
    for (size_t r = start; r < std::min(decode.size(), start + 64); ++r) {
      step.requests.push_back(decode[r]);
    }
    absl::StatusOr<std::vector<float>> logits = (*inst)->Run(step);
    if (!logits.ok()) return logits.status();
    const size_t vocab = logits->size() / step.requests.size();
    for (size_t r = 0; r < step.requests.size(); ++r) {
      cap.next_tokens.push_back(ArgMax(absl::MakeConstSpan(logits->data() + r * vocab, vocab)));
    }
  }
  for (const StepRequest& r : decode) blocks.Release(r.block_table);
  if (blocks.free_errors() != 0) return absl::InternalError("block bookkeeping failed");
  return cap;
}

// Mean decode step time with `context` prompt tokens already in the pools.
absl::StatusOr<double> StepMillis(const LlamaWeights& weights, int32_t dcp, int32_t context,
                                  int32_t steps) {
  InstanceOptions o;
  o.parallel = ParallelConfig{kTp, 1, dcp, kBlock, 1};
  o.kv_bytes_per_rank = int64_t{1} << 30;
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(weights, o);
  if (!inst.ok()) return inst.status();
  BlockManager blocks((*inst)->num_blocks());
  absl::StatusOr<std::vector<int32_t>> table = blocks.Allocate(static_cast<int32_t>(
      VirtualBlocksFor(o.parallel.dcp_geometry(), int64_t{context} + steps + 1)));
  if (!table.ok()) return table.status();
  const std::vector<int32_t> prompt = Prompt(-1, context);
  for (int32_t start = 0; start < context; start += 2048) {  // the engine's default chunk
    StepInput step;
    const int32_t n = std::min(2048, context - start);
    step.requests.push_back(
        {start, std::vector<int32_t>(prompt.begin() + start, prompt.begin() + start + n), *table,
         false});
    if (absl::Status s = (*inst)->Run(step).status(); !s.ok()) return s;
  }
  double total = 0;
  for (int32_t s = -1; s < steps; ++s) {  // step -1 warms up
    StepInput step;
    step.requests.push_back({context + s + 1, {5}, *table, true});
    const absl::Time t0 = absl::Now();
    if (absl::Status st = (*inst)->Run(step).status(); !st.ok()) return st;
    if (s >= 0) total += absl::ToDoubleSeconds(absl::Now() - t0);
  }
  return total / steps * 1e3;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "decode_scaling: %s\n", s.ToString().c_str());
  return 1;
}

int Main() {
  const int32_t context = absl::GetFlag(FLAGS_context), steps = absl::GetFlag(FLAGS_steps);
  SyntheticModelOptions so;
  so.layers = absl::GetFlag(FLAGS_layers);
  so.head_dim = absl::GetFlag(FLAGS_head_dim);
  so.q_heads = 8;
  so.kv_heads = 2;
  so.hidden = 512;
  so.intermediate = 1024;
  so.context = std::max(context + steps, absl::GetFlag(FLAGS_capacity_prompt)) + 16;
  const std::string path = "/tmp/tandem-decode-scaling.gguf";
  if (absl::Status s = WriteSyntheticModel(so, path); !s.ok()) return Fail(s);
  absl::StatusOr<LoadedModel> model = LoadModel(path, LoadOptions{[](absl::string_view) {}, true});
  std::remove(path.c_str());
  if (!model.ok()) return Fail(model.status());
  std::printf("synthetic model: %d layers, 8 q heads, 2 KV heads, head_dim %d, tp %d, block %d\n",
              so.layers, so.head_dim, kTp, kBlock);

  std::printf("capacity: %d MiB KV per rank, prompts of %d tokens until admission fails\n",
              absl::GetFlag(FLAGS_capacity_kv_mib), absl::GetFlag(FLAGS_capacity_prompt));
  std::printf("%4s %8s %10s %16s %10s\n", "dcp", "blocks", "requests", "tokens admitted",
              "vs dcp 1");
  std::vector<Capacity> caps;
  for (int32_t dcp : {1, 2, 4}) {
    absl::StatusOr<Capacity> cap = MeasureCapacity(model->weights, dcp);
    if (!cap.ok()) return Fail(cap.status());
    caps.push_back(*std::move(cap));
    const Capacity& c = caps.back();
    std::printf("%4d %8d %10d %16lld %10.3f   (stopped by: %s)\n", dcp, c.blocks, c.requests,
                static_cast<long long>(c.tokens),
                static_cast<double>(c.tokens) / static_cast<double>(caps[0].tokens),
                c.stop.c_str());
    // The same prompts must decode to the same tokens whatever the layout.
    for (size_t r = 0; r < std::min(c.next_tokens.size(), caps[0].next_tokens.size()); ++r) {
      if (c.next_tokens[r] != caps[0].next_tokens[r]) {
        return Fail(absl::InternalError(absl::StrCat("dcp ", dcp, " request ", r, " decoded token ",
                                                     c.next_tokens[r], ", dcp 1 decoded ",
                                                     caps[0].next_tokens[r])));
      }
    }
  }
  std::printf("every admitted prompt's KV was read back; decoded tokens agree across dcp\n");

  std::printf("step time: context %d, batch 1, %d steps\n", context, steps);
  std::printf("%4s %14s %10s\n", "dcp", "step ms", "vs dcp 1");
  double ms1 = 0, ms4 = 0;
  for (int32_t dcp : {1, 2, 4}) {
    absl::StatusOr<double> ms = StepMillis(model->weights, dcp, context, steps);
    if (!ms.ok()) return Fail(ms.status());
    if (dcp == 1) ms1 = *ms;
    if (dcp == 4) ms4 = *ms;
    std::printf("%4d %14.2f %10.3f\n", dcp, *ms, *ms / ms1);
  }
  std::printf("RESULT dcp4_capacity_ratio=%.3f\n",
              static_cast<double>(caps[2].tokens) / static_cast<double>(caps[0].tokens));
  std::printf("RESULT dcp4_step_time_ratio=%.3f\n", ms4 / ms1);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::Main();
}
