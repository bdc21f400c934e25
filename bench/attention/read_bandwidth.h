// STREAM-like read bandwidth: the yardstick the decode attention benchmark divides by.
//
// Sums a float buffer with every thread ParallelFor may use (each thread a contiguous share),
// with the widest vector loads the CPU has (AVX-512 when present, as the attention kernels), so
// the reference is what the memory system delivers to reads, not what a scalar loop manages.
// Make the buffer much larger than the last-level cache, or the number measures the cache.
#pragma once

#include <cstdint>

#include "bench/attention/bench_clock.h"

namespace tandem::bench {

struct ReadPass {
  double seconds = 0;
  double checksum = 0;  // keeps the compiler from discarding the reads
};

// One timed pass over buf[0, n).
ReadPass TimedReadPass(const float* buf, int64_t n, BenchClock clock);

}  // namespace tandem::bench
