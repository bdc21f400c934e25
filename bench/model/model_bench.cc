// model_bench: the real model on one CPU instance (tp=1, every core).
//   * prefill tokens/s for a 512-token prompt and the share of prefill time inside the linear
//     layers' GEMMs (oneDNN, plus dequantising quantised weight tiles for them; goal >= 0.8:
//     everything else — attention, norms, RoPE — must be small). For each --fraction_lengths
//     prompt length the share is measured twice: with the residual add and SiLU·up fused into
//     the GEMMs as post-ops (their time counts as GEMM time) and with them run as separate
//     passes (GEMM time is then the plain GEMMs only);
//   * decode tokens/s at batch 1 and 16, and the weight bytes streamed per decode step ÷ time,
//     against a STREAM-like read bandwidth measured in the same run;
//   * the prefill GEMMs' achieved GFLOP/s (2·weights FLOPs per token of the linear layers, over
//     oneDNN's time) beside the f32 FMA peak of this machine's active path, measured in the same
//     run (fma_peak.h): RESULT prefill_gemm_of_fma_peak (the GEMMs' share of that peak) and
//     prefill_fma_peak_tok_s (the prefill rate the linear layers alone would allow at the peak).
// RESULT lines at the end. Record results in docs/PERFORMANCE.md.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "attention/cpu/cpu_isa.h"
#include "bench/attention/bench_buffer.h"
#include "bench/attention/read_bandwidth.h"
#include "bench/model/fma_peak.h"
#include "common/parallel_for.h"
#include "engine/instance.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/dnnl_linear.h"
#include "model/cpu/quant_linear.h"
#include "model/format/model_loader.h"

ABSL_FLAG(std::string, model, "", "GGUF model (default: $TANDEM_MODEL)");
ABSL_FLAG(int32_t, prompt_tokens, 512, "prefill prompt length");
ABSL_FLAG(int32_t, decode_steps, 24, "timed decode steps per batch size");
ABSL_FLAG(int32_t, repeats, 3, "timed prefill runs (best is reported)");
ABSL_FLAG(int64_t, bw_mib, 1024, "read-bandwidth buffer, MiB (well above the L3 size)");
ABSL_FLAG(std::string, decode_batches, "1,16",
          "decode batch sizes to time (the first one is the "
          "weight-stream ratio's)");
ABSL_FLAG(std::string, fraction_lengths, "512,4096",
          "prompt lengths for the GEMM share with and without fused epilogues (empty: none)");

namespace tandem {
namespace {

struct Timed {
  double wall = 0, gemm = 0;  // gemm: oneDNN's GEMMs plus the weight tiles' dequantisation
  double dnnl = 0;            // oneDNN's GEMMs alone
};

std::vector<int32_t> Blocks(int32_t first, int32_t count) {
  std::vector<int32_t> b(count);
  for (int32_t i = 0; i < count; ++i) b[i] = first + i;
  return b;
}

int Main() {
  std::string path = absl::GetFlag(FLAGS_model);
  if (path.empty() && std::getenv("TANDEM_MODEL") != nullptr) path = std::getenv("TANDEM_MODEL");
  if (path.empty()) {
    std::fprintf(stderr, "model_bench: pass --model or set TANDEM_MODEL (deploy/fetch-model.sh)\n");
    return 2;
  }
  absl::StatusOr<LoadedModel> model = LoadModel(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const LlamaConfig c = model->weights.config;
  std::printf("cpu kernels: %s\n", DescribeCpuIsa().c_str());
  InstanceOptions o;
  o.kv_bytes_per_rank = int64_t{512} << 20;
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(model->weights, o);
  if (!inst.ok()) {
    std::fprintf(stderr, "%s\n", inst.status().ToString().c_str());
    return 1;
  }
  model->weights = LlamaWeights();
  std::mt19937_64 rng(1);
  auto random_prompt = [&](int n) {
    std::vector<int32_t> p(n);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % c.vocab_size);
    return p;
  };
  auto run = [&](const StepInput& step) -> Timed {
    DnnlLinear::ResetTotalSeconds();
    QuantLinear::ResetDequantSeconds();
    const absl::Time t0 = absl::Now();
    absl::StatusOr<std::vector<float>> r = (*inst)->Run(step);
    Timed t{absl::ToDoubleSeconds(absl::Now() - t0),
            DnnlLinear::TotalSeconds() + QuantLinear::DequantSeconds(), DnnlLinear::TotalSeconds()};
    if (!r.ok()) {
      std::fprintf(stderr, "step failed: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    return t;
  };
  const int32_t bs = o.parallel.block_size;

  // ---- prefill ----
  const int32_t n = absl::GetFlag(FLAGS_prompt_tokens);
  const int32_t prompt_blocks = (n + bs - 1) / bs;
  StepInput prefill;
  prefill.requests.push_back({0, random_prompt(n), Blocks(0, prompt_blocks), true});
  run(prefill);  // warm-up: oneDNN primitives for these shapes
  Timed best{1e30, 0, 0};
  for (int i = 0; i < absl::GetFlag(FLAGS_repeats); ++i) {
    const Timed t = run(prefill);
    if (t.wall < best.wall) best = t;
  }
  const double gemm_fraction = best.gemm / best.wall;

  // ---- GEMM share with and without the fused epilogues ----
  struct Fraction {
    int32_t tokens;
    double fused, unfused;
  };
  std::vector<Fraction> fractions;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_fraction_lengths), ',', absl::SkipEmpty())) {
    int32_t len = 0;
    if (!absl::SimpleAtoi(part, &len) || len <= 0) continue;
    StepInput p;
    p.requests.push_back({0, random_prompt(len), Blocks(0, (len + bs - 1) / bs), true});
    Fraction f{len, 0, 0};
    for (bool fused : {true, false}) {
      SetCpuEpilogueFusion(fused);
      run(p);  // warm-up: primitives for this length and mode
      Timed b{1e30, 0, 0};
      for (int i = 0; i < std::min(absl::GetFlag(FLAGS_repeats), len > 1024 ? 2 : 3); ++i) {
        const Timed t = run(p);
        if (t.wall < b.wall) b = t;
      }
      (fused ? f.fused : f.unfused) = b.gemm / b.wall;
    }
    SetCpuEpilogueFusion(true);
    fractions.push_back(f);
  }

  // ---- decode ----
  // Every resident weight byte is read once per decode step (the embedding table is the LM head
  // when tied; a separate table is read a row per token, a slight overcount).
  const int64_t weight_bytes = (*inst)->weight_bytes(0);
  struct DecodeResult {
    int batch;
    double step_s;
  };
  std::vector<DecodeResult> decode;
  const int32_t steps = absl::GetFlag(FLAGS_decode_steps);
  const int32_t ctx = 64;
  const int32_t seq_blocks = (ctx + steps + 2 + bs - 1) / bs;
  std::vector<int> batches;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_decode_batches), ',', absl::SkipEmpty())) {
    int b = 0;
    if (absl::SimpleAtoi(part, &b) && b > 0) batches.push_back(b);
  }
  if (batches.empty()) {
    std::fprintf(stderr, "model_bench: --decode_batches needs at least one batch size\n");
    return 2;
  }
  for (int batch : batches) {
    StepInput p;
    for (int r = 0; r < batch; ++r) {
      p.requests.push_back({0, random_prompt(ctx), Blocks(r * seq_blocks, seq_blocks), false});
    }
    run(p);
    std::vector<int32_t> last(batch, 1);
    double total = 0;
    for (int s = -2; s < steps; ++s) {  // two warm-up steps
      StepInput step;
      for (int r = 0; r < batch; ++r) {
        step.requests.push_back({ctx + s + 2, {last[r]}, Blocks(r * seq_blocks, seq_blocks), true});
      }
      const Timed t = run(step);
      if (s >= 0) total += t.wall;
    }
    decode.push_back({batch, total / steps});
  }

  // ---- memory bandwidth, same run ----
  const int64_t floats = (absl::GetFlag(FLAGS_bw_mib) << 20) / 4;
  bench::BenchBuffer buf(floats * 4, /*huge_pages=*/false);
  float* f = reinterpret_cast<float*>(buf.data());
  ParallelFor(floats, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f[i] = static_cast<float>(i & 1023);
  });
  double bw_s = 1e30;
  for (int i = 0; i < 3; ++i)
    bw_s = std::min(bw_s, bench::TimedReadPass(f, floats, bench::BenchClock::kWall).seconds);
  const double bw = floats * 4.0 / bw_s / 1e9;

  // ---- f32 FMA peak, same run ----
  // The prefill's linear layers multiply f32 activations by the dequantised weights (the
  // exactness rule): 2·(weights of the layers' matrices) FLOPs per prompt token, all inside
  // oneDNN's GEMMs. Against the FMA peak this says how close the GEMMs are to the core's limit,
  // and what prefill rate that limit allows.
  const bench::FmaPeak peak = bench::MeasureFmaPeak(ActiveCpuIsa());
  const double layer_weights = static_cast<double>(c.hidden_size) *
                               (2.0 * c.num_q_heads * c.head_dim +
                                2.0 * c.num_kv_heads * c.head_dim + 3.0 * c.intermediate_size);
  const double prefill_flops = 2.0 * n * layer_weights * c.num_layers;

  std::printf("model: %s (%d layers, hidden %d, vocab %d), resident weights %.0f MB, %d threads\n",
              c.name.c_str(), c.num_layers, c.hidden_size, c.vocab_size, weight_bytes / 1e6,
              ThreadsForThisThread());
  std::printf("%-28s %12s\n", "measure", "value");
  std::printf("%-28s %12.1f\n", "prefill tokens/s", n / best.wall);
  std::printf("%-28s %12.3f\n", "prefill wall s", best.wall);
  std::printf("%-28s %12.3f\n", "prefill GEMM s", best.gemm);
  for (const DecodeResult& r : decode) {
    std::printf("decode batch %-2d tokens/s      %12.1f\n", r.batch, r.batch / r.step_s);
    std::printf("decode batch %-2d weights GB/s  %12.2f\n", r.batch, weight_bytes / r.step_s / 1e9);
  }
  std::printf("%-28s %12.2f\n", "read bandwidth GB/s", bw);
  std::printf("prefill linear-layer GFLOP   %12.1f\n", prefill_flops / 1e9);
  std::printf("prefill oneDNN GEMM GFLOP/s  %12.1f\n", prefill_flops / best.dnnl / 1e9);
  std::printf("prefill GEMM+dequant GFLOP/s %12.1f\n", prefill_flops / best.gemm / 1e9);
  if (peak.lanes > 0) {
    std::printf("f32 FMA peak GFLOP/s, 1 thr  %12.1f  (%d-lane FMAs, %s)\n", peak.one_thread_gflops,
                peak.lanes, CpuIsaName(ActiveCpuIsa()));
    std::printf("f32 FMA peak GFLOP/s, %d thr  %12.1f\n", peak.threads, peak.all_threads_gflops);
    std::printf("prefill tok/s at FMA peak    %12.1f  (linear layers only, nothing else)\n",
                peak.all_threads_gflops * 1e9 / (prefill_flops / n));
  }
  for (const Fraction& f : fractions) {
    std::printf("prefill %-5d GEMM share, epilogues fused    %8.3f\n", f.tokens, f.fused);
    std::printf("prefill %-5d GEMM share, epilogues separate %8.3f\n", f.tokens, f.unfused);
  }
  std::printf("RESULT decode_weight_stream_bw_ratio=%.3f\n",
              weight_bytes / decode[0].step_s / 1e9 / bw);
  for (const Fraction& f : fractions) {
    std::printf("RESULT prefill_gemm_fraction_%d_with_epilogues=%.3f\n", f.tokens, f.fused);
    std::printf("RESULT prefill_gemm_fraction_%d_without_epilogues=%.3f\n", f.tokens, f.unfused);
  }
  std::printf("RESULT prefill_gemm_fraction=%.3f\n", gemm_fraction);
  if (peak.lanes > 0) {
    std::printf("RESULT prefill_gemm_of_fma_peak=%.3f\n",
                prefill_flops / best.dnnl / 1e9 / peak.all_threads_gflops);
    std::printf("RESULT prefill_fma_peak_tok_s=%.1f\n",
                peak.all_threads_gflops * 1e9 / (prefill_flops / n));
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::Main();
}
