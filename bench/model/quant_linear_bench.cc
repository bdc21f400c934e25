// quant_linear_bench: QuantLinear's two paths on SmolLM2's matrix shapes — the quantised GEMV
// kernels and the dequantised-tile oneDNN GEMM — for a range of batch sizes m, in µs per call and
// weight GB/s, so the crossover (QuantLinear::kDefaultSmallBatchLimit) can be read off.
//   quant_linear_bench [--type q4_1] [--threads 0] [--ms 1,2,4,8,16,32,48,64,96,128]
// Last line: RESULT quant_gemv_crossover_m=<smallest m where the tiled GEMM wins on the FFN shape>.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/parallel_for.h"
#include "model/cpu/quant_linear.h"

ABSL_FLAG(std::string, type, "q4_1", "q4_0, q4_1, q8_0, q4_k, q6_k, f16 or bf16");
ABSL_FLAG(int32_t, threads, 0, "threads (0: every hardware thread)");
ABSL_FLAG(std::string, ms, "1,2,4,8,16,24,32,48,64,96,128", "batch sizes");
ABSL_FLAG(double, seconds, 0.3, "time per measurement");

namespace tandem {
namespace {

GgmlType ParseType(const std::string& s) {
  if (s == "q4_0") return GgmlType::kQ4_0;
  if (s == "q8_0") return GgmlType::kQ8_0;
  if (s == "q4_k") return GgmlType::kQ4_K;
  if (s == "q6_k") return GgmlType::kQ6_K;
  if (s == "f16") return GgmlType::kF16;
  if (s == "bf16") return GgmlType::kBF16;
  return GgmlType::kQ4_1;
}

// Random blocks with every f16 field set to a small finite value.
std::vector<uint8_t> RandomBlocks(GgmlType type, int64_t n, int64_t k) {
  const GgmlTypeInfo& info = GgmlTypeTraits(type);
  std::vector<uint8_t> out(n * (k / info.block_size) * info.block_bytes);
  std::mt19937_64 rng(1);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng() & 0x3f);  // small f16/bf16 exponents
  return out;
}

double MicrosPerCall(const QuantLinear& op, const std::vector<float>& x, int64_t m,
                     std::vector<float>& y) {
  auto once = [&] { (void)op.Forward(x.data(), m, y.data()); };
  once();
  int64_t calls = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 4; ++i) once();
    calls += 4;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < absl::GetFlag(FLAGS_seconds));
  return elapsed / calls * 1e6;
}

int Main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
  if (absl::GetFlag(FLAGS_threads) > 0) SetThreadsForThisThread(absl::GetFlag(FLAGS_threads));
  const GgmlType type = ParseType(absl::GetFlag(FLAGS_type));
  std::vector<int64_t> ms;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_ms), ',')) {
    int64_t m;
    if (absl::SimpleAtoi(s, &m) && m > 0) ms.push_back(m);
  }
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"wq/wo 576x576", 576, 576},
                          {"gate/up 1536x576", 1536, 576},
                          {"down 576x1536", 576, 1536},
                          {"lm_head 49152x576", 49152, 576}};
  std::printf("type %s, %d threads, CPU path %s\n", std::string(GgmlTypeName(type)).c_str(),
              ThreadsForThisThread(), CpuIsaName(ActiveCpuIsa()));
  std::printf("%-20s %5s %12s %12s %10s %10s\n", "shape", "m", "gemv us", "tiled us", "gemv GB/s",
              "winner");
  int64_t crossover = 0;
  for (const Shape& s : shapes) {
    const std::vector<uint8_t> blocks = RandomBlocks(type, s.n, s.k);
    absl::StatusOr<std::unique_ptr<QuantLinear>> op =
        QuantLinear::Create(type, blocks.data(), s.n, s.k, nullptr);
    if (!op.ok()) {
      std::fprintf(stderr, "%s\n", op.status().ToString().c_str());
      return 1;
    }
    for (int64_t m : ms) {
      std::vector<float> x(m * s.k, 0.01f), y(m * s.n);
      QuantLinear::SetSmallBatchLimit(1 << 30);
      const double gemv = MicrosPerCall(**op, x, m, y);
      QuantLinear::SetSmallBatchLimit(0);
      const double tiled = MicrosPerCall(**op, x, m, y);
      std::printf("%-20s %5ld %12.1f %12.1f %10.2f %10s\n", s.name, static_cast<long>(m), gemv,
                  tiled, static_cast<double>(blocks.size()) / gemv / 1e3,
                  gemv <= tiled ? "gemv" : "tiled");
      if (s.n == 1536 && crossover == 0 && tiled < gemv) crossover = m;
    }
  }
  QuantLinear::SetSmallBatchLimit(QuantLinear::kDefaultSmallBatchLimit);
  std::printf("RESULT quant_gemv_crossover_m=%ld\n", static_cast<long>(crossover));
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::Main();
}
