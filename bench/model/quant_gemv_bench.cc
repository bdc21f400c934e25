// quant_gemv_bench: the quantised kernels per ISA path (model/cpu/quant_gemv.h), so the paths can
// be compared with each other and with what the memory system delivers, in one run:
//   * read: the STREAM-like read bandwidth (bench/attention/read_bandwidth.h) over 1 GiB;
//   * stream m=1 / m=16: every matrix of SmolLM2-135M's 30 layers (q, k, v, o, gate, up, down:
//     ~80 MB of Q4_1 rows, far beyond L3) through QuantLinear::Forward in turn, as a decode step
//     does, in weight GB/s (resident bytes) and as a fraction of the read bandwidth;
//   * hot m=1 / m=16: one 1536×576 matrix again and again (L2-resident: compute, not memory), in
//     G weights/s;
//   * dequant: that matrix's rows dequantised to f32 (the prefill tiles), in G weights/s.
// Super-block types (Q4_K, Q5_K, Q6_K: 256-element blocks) take each K rounded up to whole blocks
// (576 -> 768), so their rows can be read at all; their GB/s and ratio stay comparable, their
// G weights/s count the larger matrices' weights.
// Each figure is the best of --reps repetitions (the machine may be shared).
//   quant_gemv_bench [--types q4_1,q8_0] [--isas avx512,avx2] [--threads 1] [--reps 5]
//                    [--clock wall|cpu]  (cpu: the thread's CPU time, for --threads 1 on a
//                                         busy machine)
// Last lines: RESULT quant_gemv_stream_bw_ratio_<isa>_<type>=<stream m=1 GB/s ÷ read GB/s>.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "attention/cpu/cpu_isa.h"
#include "bench/attention/bench_clock.h"
#include "bench/attention/read_bandwidth.h"
#include "common/parallel_for.h"
#include "model/cpu/quant_linear.h"
#include "model/cpu/quant_panel_gemm.h"

ABSL_FLAG(std::string, types, "q4_1,q4_0,q8_0", "weight types");
ABSL_FLAG(std::string, isas, "avx512,avx2", "ISA paths (those this CPU lacks are skipped)");
ABSL_FLAG(int32_t, threads, 1, "threads (0: every hardware thread)");
ABSL_FLAG(int32_t, reps, 5, "repetitions; each figure is the best");
ABSL_FLAG(std::string, clock, "wall", "wall or cpu (the calling thread's CPU time)");
ABSL_FLAG(int64_t, panel_min_rows, -1,
          "the smallest m the panel kernels take (-1: the default, "
          "quant::internal::kDefaultPanelMinRows; 17: never in this benchmark)");
ABSL_FLAG(std::string, hot_ms, "",
          "more batch sizes (up to 16) for the hot matrix, one line each: where the GEMV and "
          "panel kernels (quant_panel_gemm.h) cross over");

namespace tandem {
namespace {

using bench::BenchClock;
using bench::ClockSeconds;

bool ParseType(const std::string& s, GgmlType* t) {
  if (s == "q4_0")
    *t = GgmlType::kQ4_0;
  else if (s == "q4_1")
    *t = GgmlType::kQ4_1;
  else if (s == "q8_0")
    *t = GgmlType::kQ8_0;
  else if (s == "q5_0")
    *t = GgmlType::kQ5_0;
  else if (s == "q5_1")
    *t = GgmlType::kQ5_1;
  else if (s == "q4_k")
    *t = GgmlType::kQ4_K;
  else if (s == "q5_k")
    *t = GgmlType::kQ5_K;
  else if (s == "q6_k")
    *t = GgmlType::kQ6_K;
  else if (s == "f16")
    *t = GgmlType::kF16;
  else
    return false;
  return true;
}

bool ParseIsa(const std::string& s, CpuIsa* isa) {
  if (s == "avx512")
    *isa = CpuIsa::kAvx512;
  else if (s == "avx2")
    *isa = CpuIsa::kAvx2;
  else if (s == "portable")
    *isa = CpuIsa::kPortable;
  else
    return false;
  return true;
}

// Random quants with small finite f16 scales (bytes 0..0x3f make every f16 field small).
std::vector<uint8_t> RandomRows(GgmlType type, int64_t n, int64_t k, uint64_t seed) {
  const GgmlTypeInfo& info = GgmlTypeTraits(type);
  std::vector<uint8_t> out(n * (k / info.block_size) * info.block_bytes);
  std::mt19937_64 rng(seed);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng() & 0x3f);
  return out;
}

std::unique_ptr<QuantLinear> Make(GgmlType type, int64_t n, int64_t k, uint64_t seed) {
  const std::vector<uint8_t> rows = RandomRows(type, n, k, seed);
  absl::StatusOr<std::unique_ptr<QuantLinear>> op =
      QuantLinear::Create(type, rows.data(), n, k, nullptr);
  if (!op.ok()) {
    std::fprintf(stderr, "%s\n", op.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(op);
}

// Best seconds of `reps` calls of fn.
template <class F>
double Best(int reps, BenchClock clock, F fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = ClockSeconds(clock);
    fn();
    best = std::min(best, ClockSeconds(clock) - t0);
  }
  return best;
}

int Main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads > 0) SetThreadsForThisThread(threads);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  if (absl::GetFlag(FLAGS_panel_min_rows) >= 0) {
    quant::internal::SetPanelMinRows(absl::GetFlag(FLAGS_panel_min_rows));
  }
  const BenchClock clock =
      absl::GetFlag(FLAGS_clock) == "cpu" ? BenchClock::kThreadCpu : BenchClock::kWall;
  std::vector<GgmlType> types;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_types), ',')) {
    GgmlType t;
    if (!ParseType(std::string(s), &t)) {
      std::fprintf(stderr, "unknown type %s\n", std::string(s).c_str());
      return 1;
    }
    types.push_back(t);
  }
  std::vector<CpuIsa> isas;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_isas), ',')) {
    CpuIsa isa;
    if (!ParseIsa(std::string(s), &isa)) {
      std::fprintf(stderr, "unknown ISA %s\n", std::string(s).c_str());
      return 1;
    }
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  std::printf("%d threads, %s clock, best of %d; CPU: %s\n", ThreadsForThisThread(),
              clock == BenchClock::kWall ? "wall" : "thread CPU", reps, DescribeCpuIsa().c_str());

  // The read yardstick: 1 GiB, far beyond any L3.
  const int64_t floats = int64_t{1} << 28;
  std::vector<float> buf(floats, 1.f);
  double read_s = 1e30;
  for (int r = 0; r < reps; ++r) {
    read_s = std::min(read_s, bench::TimedReadPass(buf.data(), floats, clock).seconds);
  }
  buf = {};
  const double read_gbs = static_cast<double>(floats) * 4 / read_s / 1e9;
  std::printf("read bandwidth %.2f GB/s\n", read_gbs);

  struct Shape {
    int64_t n, k;
  };
  const Shape layer[] = {{576, 576},  {192, 576},  {192, 576}, {576, 576},
                         {1536, 576}, {1536, 576}, {576, 1536}};
  constexpr int kLayers = 30;
  std::vector<std::pair<std::string, double>> results;
  std::printf("%-7s %-5s %9s %9s %9s %9s %10s %10s %10s\n", "isa", "type", "stream1", "ratio",
              "stream16", "ratio", "hot1 Gw/s", "hot16 Gw/s", "deq Gw/s");
  for (GgmlType type : types) {
    const int64_t block = GgmlTypeTraits(type).block_size;
    auto whole = [&](int64_t k) { return (k + block - 1) / block * block; };
    std::vector<std::unique_ptr<QuantLinear>> ops;
    int64_t bytes = 0;
    for (int l = 0; l < kLayers; ++l) {
      for (const Shape& s : layer) {
        ops.push_back(Make(type, s.n, whole(s.k), ops.size() + 1));
        bytes += ops.back()->resident_bytes();
      }
    }
    const std::unique_ptr<QuantLinear> hot = Make(type, 1536, whole(576), 99);
    const int64_t hot_weights = 1536 * whole(576);
    std::vector<float> x(16 * 1536, 0.01f), y(16 * 1536), tile(hot_weights);
    for (CpuIsa isa : isas) {
      if (!PinCpuIsa(isa).ok()) continue;
      auto stream = [&](int64_t m) {
        return Best(reps, clock, [&] {
          for (const auto& op : ops) (void)op->Forward(x.data(), m, y.data());
        });
      };
      auto hot_gws = [&](int64_t m) {
        constexpr int kCalls = 50;
        const double s = Best(reps, clock, [&] {
          for (int i = 0; i < kCalls; ++i) (void)hot->Forward(x.data(), m, y.data());
        });
        return static_cast<double>(hot_weights) * kCalls / s / 1e9;
      };
      const double s1 = stream(1), s16 = stream(16);
      const double gbs1 = static_cast<double>(bytes) / s1 / 1e9;
      const double gbs16 = static_cast<double>(bytes) / s16 / 1e9;
      const double h1 = hot_gws(1), h16 = hot_gws(16);
      // Dequantised rows: the same call QuantLinear's tiled path makes, on this thread.
      std::vector<int32_t> ids(1536);
      for (int32_t i = 0; i < 1536; ++i) ids[i] = i;
      constexpr int kDeq = 20;
      const double deq_s = Best(reps, clock, [&] {
        for (int i = 0; i < kDeq; ++i) (void)hot->DequantizeRows(ids.data(), 1536, tile.data());
      });
      const double deq = static_cast<double>(hot_weights) * kDeq / deq_s / 1e9;
      const std::string name = std::string(GgmlTypeName(type));
      std::printf("%-7s %-5s %9.2f %9.3f %9.2f %9.3f %10.2f %10.2f %10.2f\n", CpuIsaName(isa),
                  name.c_str(), gbs1, gbs1 / read_gbs, gbs16, gbs16 / read_gbs, h1, h16, deq);
      std::string key = std::string(CpuIsaName(isa)) + "_" + name;
      std::transform(key.begin(), key.end(), key.begin(), [](char c) { return std::tolower(c); });
      results.push_back({key, gbs1 / read_gbs});
      for (absl::string_view ms :
           absl::StrSplit(absl::GetFlag(FLAGS_hot_ms), ',', absl::SkipEmpty())) {
        int64_t m = 0;
        if (!absl::SimpleAtoi(ms, &m) || m < 1 || m > 16) continue;
        // G weights/s times m: multiply-adds per second, comparable across batch sizes.
        const double gws = hot_gws(m);
        std::printf("  hot m=%-3lld %10.2f G weights/s %10.2f G FMA/s\n", static_cast<long long>(m),
                    gws, gws * static_cast<double>(m));
      }
    }
    UnpinCpuIsa();
  }
  std::printf(
      "(stream: GB/s of resident weights, ratio: of the read bandwidth; hot: G weights/s; "
      "deq: dequantised rows, G weights/s)\n");
  for (const auto& [key, ratio] : results) {
    std::printf("RESULT quant_gemv_stream_bw_ratio_%s=%.3f\n", key.c_str(), ratio);
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::Main();
}
