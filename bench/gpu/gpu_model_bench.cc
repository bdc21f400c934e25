// Whole-model GPU benchmark on a model file (a synthetic one from tandem-make-model: the real
// model does not travel to a GPU machine), one process, one GPU, for each path of the CUDA
// backend (`--paths`; TANDEM_CUDA_ACTIVATIONS and TANDEM_CUDA_GRAPHS are set here before each
// instance is built): bf16_graphs (bf16 activations + CUDA graphs, the new path), bf16, f32
// (the old default):
//
// * decode, batch 1: a short prompt, then `--decode_tokens` greedy tokens; the step time is the
//   time from the first to the last token ÷ (tokens − 1), best of `--repeats`. The limit is
//   streaming the weights once per step: the bf16 bytes of every linear layer (QKV, O, gate, up,
//   down, LM head) ÷ the read bandwidth measured in this run (read_bandwidth.h).
//     RESULT gpu_decode_b1_roofline_ratio=<limit ÷ step>         (bf16_graphs, headline)
//     RESULT gpu_decode_b1_roofline_ratio_<path>=<limit ÷ step>  (the other paths)
// * prefill: a `--prefill_tokens` prompt (fresh random ids each repeat, so no prefix reuse),
//   time to the first token, best of `--repeats`; printed as `prefill<N>_ms <path> <ms>` for
//   bench/gpu/run.sh to set beside the eager PyTorch reference (bench/gpu/eager_llama.py).
//
// A path that fails is reported and the others still run; exit status 1 when any failed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/gpu/read_bandwidth.h"
#include "engine/combined_engine.h"
#include "model/format/model_loader.h"

ABSL_FLAG(std::string, model, "", "model file (tandem-make-model output)");
ABSL_FLAG(std::string, paths, "bf16_graphs,bf16,f32",
          "CUDA backend paths to measure, in order: f32, bf16, f32_graphs, bf16_graphs");
ABSL_FLAG(int32_t, prefill_tokens, 512, "prompt length of the prefill measurement");
ABSL_FLAG(int32_t, decode_tokens, 64, "tokens generated in the decode measurement");
ABSL_FLAG(int32_t, repeats, 3, "timed repeats (best is reported)");
ABSL_FLAG(int64_t, kv_budget_mb, 2048, "KV pool MiB");

namespace {

struct Timing {
  double first_token_s = 0;  // request start → first token
  double decode_step_s = 0;  // (last − first token) ÷ (tokens − 1)
};

absl::StatusOr<Timing> Run(tandem::CombinedEngine& engine, std::vector<int32_t> prompt,
                           int32_t new_tokens) {
  tandem::GenerateRequest req;
  req.id = "bench";
  req.prompt = std::move(prompt);
  req.max_new_tokens = new_tokens;
  std::vector<absl::Time> at;
  absl::Notification done;
  absl::StatusOr<tandem::GenerateResult> result = absl::UnknownError("pending");
  const absl::Time start = absl::Now();
  absl::Status s = engine.Generate(
      std::move(req), [&](int32_t) { at.push_back(absl::Now()); },
      [&](absl::StatusOr<tandem::GenerateResult> r) {
        result = std::move(r);
        done.Notify();
      });
  if (!s.ok()) return s;
  if (!done.WaitForNotificationWithTimeout(absl::Minutes(5))) {
    return absl::DeadlineExceededError("generation took over 5 minutes");
  }
  if (!result.ok()) return result.status();
  if (static_cast<int32_t>(at.size()) != new_tokens) {
    return absl::InternalError("the engine generated fewer tokens than asked (no stop ids set)");
  }
  Timing t;
  t.first_token_s = absl::ToDoubleSeconds(at.front() - start);
  if (at.size() > 1)
    t.decode_step_s = absl::ToDoubleSeconds(at.back() - at.front()) / (at.size() - 1);
  return t;
}

std::vector<int32_t> RandomPrompt(int32_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % vocab);
  return p;
}

// One path: builds an instance with the path's environment, warms up, measures, prints.
absl::Status RunPath(const std::string& model_path, const std::string& name, double bw,
                     int32_t repeats) {
  const bool graphs = absl::EndsWith(name, "_graphs");
  const std::string act(absl::StripSuffix(name, "_graphs"));
  if (act != "f32" && act != "bf16") {
    return absl::InvalidArgumentError(absl::StrCat("unknown path '", name, "'"));
  }
  absl::StatusOr<tandem::LoadedModel> model = tandem::LoadModel(model_path);
  if (!model.ok()) return model.status();
  const tandem::LlamaConfig c = model->weights.config;
  const double d = c.head_dim;
  const double per_layer = c.hidden_size * (c.num_q_heads * d + 2 * c.num_kv_heads * d) +
                           c.num_q_heads * d * c.hidden_size +
                           3.0 * c.hidden_size * c.intermediate_size;
  const double weight_bytes = 2.0 * (c.num_layers * per_layer + 1.0 * c.vocab_size * c.hidden_size);
  setenv("TANDEM_CUDA_ACTIVATIONS", act.c_str(), 1);
  setenv("TANDEM_CUDA_GRAPHS", graphs ? "on" : "off", 1);
  tandem::InstanceOptions io;
  io.backend = "cuda";
  io.kv_bytes_per_rank = absl::GetFlag(FLAGS_kv_budget_mb) << 20;
  absl::StatusOr<std::unique_ptr<tandem::Instance>> inst =
      tandem::Instance::Create(model->weights, io);
  if (!inst.ok()) return inst.status();
  tandem::PrefillOptions po;
  po.max_prefill_tokens = std::max(2048, absl::GetFlag(FLAGS_prefill_tokens));
  tandem::CombinedEngine engine(inst->get(), po, tandem::DecodeOptions{});

  // Warm-up (cuBLAS/cuBLASLt heuristics, lazy module loading, scratch growth, and with graphs
  // the eager sighting and the capture of every batch-1 piece).
  const int32_t n = absl::GetFlag(FLAGS_prefill_tokens);
  absl::StatusOr<Timing> warm = Run(engine, RandomPrompt(n, c.vocab_size, 99), 4);
  if (!warm.ok()) return warm.status();
  double best_step = 1e30, best_prefill = 1e30;
  for (int32_t r = 0; r < repeats; ++r) {
    absl::StatusOr<Timing> dec =
        Run(engine, RandomPrompt(16, c.vocab_size, 1000 + r), absl::GetFlag(FLAGS_decode_tokens));
    if (!dec.ok()) return dec.status();
    best_step = std::min(best_step, dec->decode_step_s);
    absl::StatusOr<Timing> pre = Run(engine, RandomPrompt(n, c.vocab_size, 2000 + r), 1);
    if (!pre.ok()) return pre.status();
    best_prefill = std::min(best_prefill, pre->first_token_s);
  }
  const double limit = weight_bytes / bw;
  std::printf(
      "decode_b1 %s: step %.3f ms, %.3f GB of bf16 weights per step -> limit %.3f ms at the "
      "measured bandwidth\n",
      name.c_str(), best_step * 1e3, weight_bytes / 1e9, limit * 1e3);
  std::printf("prefill%d_ms %s %.3f\n", n, name.c_str(), best_prefill * 1e3);
  std::printf("RESULT gpu_decode_b1_roofline_ratio%s=%.4f\n",
              name == "bf16_graphs" ? "" : absl::StrCat("_", name).c_str(), limit / best_step);
  return absl::OkStatus();
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "gpu_model_bench: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string model_path = absl::GetFlag(FLAGS_model);
  if (model_path.empty()) return Fail("--model is required");
  const int32_t repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  absl::StatusOr<double> bw = tandem::bench::MeasureReadBandwidth(0, int64_t{4} << 30, 5);
  if (!bw.ok()) return Fail(bw.status().ToString());
  std::printf("memory: read bandwidth %.1f GB/s (4 GiB streamed, best of 5)\n", *bw / 1e9);
  const std::vector<std::string> paths = absl::StrSplit(absl::GetFlag(FLAGS_paths), ',');
  int failed = 0;
  for (const std::string& path_name : paths) {
    const absl::Status s = RunPath(model_path, path_name, *bw, repeats);
    if (!s.ok()) {
      std::printf("path %s FAILED: %s\n", path_name.c_str(), s.ToString().c_str());
      ++failed;
    }
    std::fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}
