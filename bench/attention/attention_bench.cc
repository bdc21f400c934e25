// attention_bench: CPU decode attention bandwidth against the machine's read bandwidth.
//
// Prints a table of KV bytes read per second for each KV dtype and a STREAM-like read of a
// large buffer with the same threads, measured interleaved in the same run; the last line is
//   RESULT decode_attention_bw_ratio=<f32 attention GB/s ÷ read GB/s>   (best pass of each).
//
//   attention_bench                      # 16 seqs × 4096 tokens × 8 KV heads × 128, GQA 4
//   attention_bench --huge_pages         # pool and read buffer on transparent huge pages
//   attention_bench --threads=1 --cpu_time   # one core; robust when other jobs share the CPU
//   attention_bench --tokens=512 --layers=2 --dtypes=f32 --read_mib=256   # quick, mostly cache
//
// The default working set (3 layers × 512 MiB of f32 KV, read in turn) is far above the 260 MiB
// L3, so both numbers come from DRAM.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "attention/cpu/cpu_isa.h"
#include "bench/attention/decode_workload.h"
#include "bench/attention/read_bandwidth.h"
#include "common/parallel_for.h"

ABSL_FLAG(int32_t, seqs, 16, "sequences (decode rows)");
ABSL_FLAG(int64_t, tokens, 4096, "cached tokens per sequence");
ABSL_FLAG(int32_t, kv_heads, 8, "KV heads");
ABSL_FLAG(int32_t, head_dim, 128, "head dim");
ABSL_FLAG(int32_t, gqa, 4, "query heads per KV head");
ABSL_FLAG(int32_t, block_size, 16, "tokens per block");
ABSL_FLAG(int32_t, layers, 3, "layers in the pool, attended in turn so each is cold");
ABSL_FLAG(std::string, dtypes, "f32,f16,bf16", "KV dtypes to measure");
ABSL_FLAG(int32_t, reps, 5, "timed passes over all layers, per dtype");
ABSL_FLAG(int64_t, read_mib, 1024, "read-bandwidth buffer, MiB (keep far above the L3)");
ABSL_FLAG(int32_t, threads, 0, "threads (0: all hardware threads)");
ABSL_FLAG(std::string, isa, "auto", "kernel path: auto, avx512, avx2 or portable");
ABSL_FLAG(bool, huge_pages, false,
          "back the KV pool and the read buffer with transparent huge pages (madvise)");
ABSL_FLAG(bool, cpu_time, false,
          "time with the calling thread's CPU clock instead of the wall clock (for busy "
          "machines; meaningful with --threads=1)");

namespace tandem::bench {
namespace {

struct Stats {
  double best = 0;
  double median = 0;
};

Stats Summarise(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return Stats{seconds.front(), seconds[seconds.size() / 2]};
}

bool ParseDType(const std::string& name, KvDType* t) {
  for (KvDType d : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    if (name == KvDTypeName(d)) {
      *t = d;
      return true;
    }
  }
  return false;
}

bool ParseIsa(const std::string& name, CpuIsa* isa) {
  for (CpuIsa i : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == CpuIsaName(i)) {
      *isa = i;
      return true;
    }
  }
  return false;
}

struct Row {
  std::string name;
  double mib = 0;  // bytes per timed call
  Stats seconds;
};

void PrintRow(const Row& r, double read_gbs) {
  const double gb = r.mib * 1048576.0 / 1e9;
  std::printf("%-22s %10.1f %9.2f %9.2f %9.2f %9.2f %7.3f\n", r.name.c_str(), r.mib,
              r.seconds.best * 1e3, r.seconds.median * 1e3, gb / r.seconds.best,
              gb / r.seconds.median, read_gbs > 0 ? (gb / r.seconds.best) / read_gbs : 1.0);
}

int Run() {
  const int threads =
      absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads) : HardwareThreads();
  SetThreadsForThisThread(threads);
  const BenchClock clock =
      absl::GetFlag(FLAGS_cpu_time) ? BenchClock::kThreadCpu : BenchClock::kWall;
  if (absl::GetFlag(FLAGS_isa) != "auto") {
    CpuIsa isa;
    if (!ParseIsa(absl::GetFlag(FLAGS_isa), &isa)) {
      std::fprintf(stderr, "--isa must be auto, avx512, avx2 or portable\n");
      return 2;
    }
    if (const absl::Status s = PinCpuIsa(isa); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  std::vector<KvDType> dtypes;
  const std::vector<std::string> names = absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',');
  for (const std::string& name : names) {
    KvDType t;
    if (!ParseDType(name, &t)) {
      std::fprintf(stderr, "unknown dtype '%s' (f32, f16, bf16)\n", name.c_str());
      return 2;
    }
    dtypes.push_back(t);
  }

  const int64_t read_floats = absl::GetFlag(FLAGS_read_mib) * 1048576 / 4;
  const bool huge_pages = absl::GetFlag(FLAGS_huge_pages);
  // Zero-filled at allocation, so every page is resident before it is timed.
  const BenchBuffer read_buf(static_cast<size_t>(read_floats) * sizeof(float), huge_pages);
  if (!read_buf) {
    std::fprintf(stderr, "cannot allocate the %ld MiB read buffer\n",
                 static_cast<long>(absl::GetFlag(FLAGS_read_mib)));
    return 2;
  }
  std::vector<double> read_seconds;
  double checksum = 0;
  auto read_pass = [&] {
    const ReadPass p =
        TimedReadPass(reinterpret_cast<const float*>(read_buf.data()), read_floats, clock);
    read_seconds.push_back(p.seconds);
    checksum += p.checksum;
  };

  std::printf(
      "clock=%s huge_pages=%d threads=%d isa=%s seqs=%d tokens=%ld kv_heads=%d head_dim=%d gqa=%d "
      "B=%d "
      "layers=%d\n",
      clock == BenchClock::kWall ? "wall" : "thread-cpu", huge_pages ? 1 : 0, threads,
      CpuIsaName(ActiveCpuIsa()), absl::GetFlag(FLAGS_seqs),
      static_cast<long>(absl::GetFlag(FLAGS_tokens)), absl::GetFlag(FLAGS_kv_heads),
      absl::GetFlag(FLAGS_head_dim), absl::GetFlag(FLAGS_gqa), absl::GetFlag(FLAGS_block_size),
      absl::GetFlag(FLAGS_layers));
  std::vector<Row> rows;
  double f32_best_gbs = -1;
  for (KvDType dtype : dtypes) {
    DecodeShape shape;
    shape.seqs = absl::GetFlag(FLAGS_seqs);
    shape.tokens = absl::GetFlag(FLAGS_tokens);
    shape.kv_heads = absl::GetFlag(FLAGS_kv_heads);
    shape.head_dim = absl::GetFlag(FLAGS_head_dim);
    shape.gqa = absl::GetFlag(FLAGS_gqa);
    shape.block_size = absl::GetFlag(FLAGS_block_size);
    shape.layers = absl::GetFlag(FLAGS_layers);
    shape.dtype = dtype;
    shape.huge_pages = huge_pages;
    absl::StatusOr<std::unique_ptr<DecodeWorkload>> w = DecodeWorkload::Create(shape);
    if (!w.ok()) {
      std::fprintf(stderr, "%s\n", std::string(w.status().message()).c_str());
      return 2;
    }
    std::printf("%s: pool %.0f MiB (%.0f MiB KV read per layer)\n",
                std::string(KvDTypeName(dtype)).c_str(), (*w)->PoolBytes() / 1048576.0,
                (*w)->KvBytesPerLayer() / 1048576.0);
    // One untimed pass warms page tables and the thread team.
    for (int32_t layer = 0; layer < shape.layers; ++layer) (*w)->TimedAttention(layer, clock);
    std::vector<double> seconds;
    for (int32_t rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
      read_pass();  // interleaved, so both see the same machine state
      for (int32_t layer = 0; layer < shape.layers; ++layer) {
        seconds.push_back((*w)->TimedAttention(layer, clock));
      }
    }
    checksum += (*w)->Checksum();
    const Row row{std::string("attention ") + std::string(KvDTypeName(dtype)),
                  (*w)->KvBytesPerLayer() / 1048576.0, Summarise(seconds)};
    if (dtype == KvDType::kF32) f32_best_gbs = row.mib * 1048576.0 / 1e9 / row.seconds.best;
    rows.push_back(row);
  }

  const Row read{"read (STREAM-like)", read_floats * 4 / 1048576.0, Summarise(read_seconds)};
  const double read_gbs = read.mib * 1048576.0 / 1e9 / read.seconds.best;
  std::printf("\n%-22s %10s %9s %9s %9s %9s %7s\n", "kernel", "MiB/call", "best ms", "med ms",
              "best GB/s", "med GB/s", "/read");
  PrintRow(read, read_gbs);
  for (const Row& r : rows) PrintRow(r, read_gbs);
  std::printf("(checksum %g)\n", checksum);
  if (f32_best_gbs < 0) {
    std::printf("no f32 row: decode_attention_bw_ratio is defined on f32; add f32 to --dtypes\n");
    return 0;
  }
  std::printf("RESULT decode_attention_bw_ratio=%.3f\n", f32_best_gbs / read_gbs);
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::bench::Run();
}
