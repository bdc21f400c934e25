// The f32 FMA throughput of this machine on a CPU kernel path, measured: a tight loop of
// independent vector FMAs (12 chains, more than FMA latency × FMA ports on the x86 cores Tandem
// targets), nothing loaded or stored — what a GEMM with exact f32 arithmetic (the exactness rule:
// f32 activations times the dequantised weights) could reach at best. model_bench prints it
// beside the prefill GEMM's achieved GFLOP/s, so how far the GEMM is from the core's limit is a
// same-run measurement.
//
// Thread-safety: reentrant; the all-threads figure runs one loop per thread of the caller's
// ParallelFor workers (common/parallel_for.h).
#pragma once

#include <cstdint>

#include "attention/cpu/cpu_isa.h"

namespace tandem::bench {

struct FmaPeak {
  double one_thread_gflops = 0;   // best of the runs, one thread
  double all_threads_gflops = 0;  // ThreadsForThisThread() threads at once, best of the runs
  int threads = 0;
  int lanes = 0;  // f32 lanes per FMA: 16 (avx512), 8 (avx2); 0 on the portable path (not measured)
};

// Each run is `fmas_per_thread` vector FMAs per thread; the best of `reps` runs (wall time).
FmaPeak MeasureFmaPeak(CpuIsa isa, int64_t fmas_per_thread = int64_t{1} << 28, int reps = 3);

}  // namespace tandem::bench
