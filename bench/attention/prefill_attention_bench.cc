// prefill_attention_bench: the causal attention of one prefill chunk through PagedAttention —
// every position of an N-token prompt attends to its prefix, as in a model's prefill step. The
// default shape is SmolLM2-135M's (9 query heads, 3 KV heads, head_dim 64, B=16, 512 tokens),
// the prompt model_bench measures. Prints milliseconds per layer and useful GFLOP/s
// (4·head_dim per query-key pair: QKᵀ and PV, causal pairs only).
// Last line: RESULT prefill_attention_gflops=<x>.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "attention/cpu/paged_attention.h"
#include "bench/attention/bench_clock.h"
#include "common/parallel_for.h"

ABSL_FLAG(int64_t, tokens, 512, "prompt tokens (all of them are query rows)");
ABSL_FLAG(int32_t, kv_heads, 3, "KV heads");
ABSL_FLAG(int32_t, gqa, 3, "query heads per KV head");
ABSL_FLAG(int32_t, head_dim, 64, "head dim");
ABSL_FLAG(int32_t, block_size, 16, "tokens per block");
ABSL_FLAG(int32_t, reps, 20, "timed calls (the best is reported)");

namespace tandem {
namespace {

int Main() {
  const int64_t n = absl::GetFlag(FLAGS_tokens);
  const int32_t kvh = absl::GetFlag(FLAGS_kv_heads), gqa = absl::GetFlag(FLAGS_gqa);
  const int32_t d = absl::GetFlag(FLAGS_head_dim), bs = absl::GetFlag(FLAGS_block_size);
  if (n < 1 || kvh < 1 || gqa < 1 || d < 1 || bs < 1) {
    std::fprintf(stderr, "prefill_attention_bench: every dimension must be >= 1\n");
    return 2;
  }
  const int32_t hq = kvh * gqa;
  PoolGeometry g;
  g.num_kv_heads = kvh;
  g.num_layers = 1;
  g.block_size = bs;
  g.head_dim = d;
  g.dtype = KvDType::kF32;
  const int64_t blocks = (n + bs - 1) / bs;
  std::vector<std::byte> pool_bytes(PoolBytes(g, blocks));
  const KvPoolView pool{pool_bytes.data(), blocks, g};
  std::vector<int32_t> table(blocks);
  for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(blocks - 1 - b);
  const int64_t offsets[2] = {0, blocks};

  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> k(n * kvh * d), v(n * kvh * d), q(n * hq * d);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : q) x = normal(rng);
  std::vector<int64_t> slots(n), position(n);
  std::vector<int32_t> request(n, 0);
  for (int64_t t = 0; t < n; ++t) {
    slots[t] = int64_t{table[t / bs]} * bs + t % bs;
    position[t] = t;
  }
  WriteKvCache(pool, 0, slots.data(), n, k.data(), v.data());
  const AttentionRows rows{n,
                           request.data(),
                           position.data(),
                           BlockTablesView{table.data(), offsets, 1},
                           DcpGeometry{bs, 1, 1},
                           0};
  if (absl::Status s = ValidateAttentionCall(pool, 0, rows, hq); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  std::vector<float> out(n * hq * d), lse(n * hq);
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  double best = 1e30;
  for (int32_t r = -2; r < absl::GetFlag(FLAGS_reps); ++r) {  // two warm-up calls
    const double t0 = bench::ClockSeconds(bench::BenchClock::kWall);
    PagedAttention(pool, 0, rows, q.data(), hq, scale, out.data(), lse.data());
    const double t = bench::ClockSeconds(bench::BenchClock::kWall) - t0;
    if (r >= 0 && t < best) best = t;
  }
  double checksum = 0;
  for (float x : out) checksum += x;
  const double pairs = static_cast<double>(n) * static_cast<double>(n + 1) / 2 * hq;
  const double gflops = 4.0 * d * pairs / best / 1e9;
  std::printf("shape: %lld tokens, %d query heads, %d KV heads, head_dim %d, B=%d, %d threads\n",
              static_cast<long long>(n), hq, kvh, d, bs, ThreadsForThisThread());
  std::printf("%-28s %12.3f\n", "ms per layer", best * 1e3);
  std::printf("%-28s %12.6g\n", "checksum", checksum);
  std::printf("RESULT prefill_attention_gflops=%.1f\n", gflops);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::Main();
}
