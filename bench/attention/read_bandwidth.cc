#include "bench/attention/read_bandwidth.h"

#include <immintrin.h>

#include <vector>

#include "common/parallel_for.h"

namespace tandem::bench {
namespace {

// Four independent accumulators keep enough loads in flight to saturate a core's bandwidth.
__attribute__((target("avx512f"))) double SumAvx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  // A store and a scalar sum rather than _mm512_reduce_add_ps, whose GCC 12 expansion trips
  // -Wuninitialized outside files built with -mavx512f (GCC bug 105593).
  float lanes[16];
  _mm512_storeu_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  double s = 0;
  for (float x : lanes) s += x;
  for (; i < n; ++i) s += p[i];
  return s;
}

double SumPortable(const float* p, int64_t n) {
  float a[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  }
  double s = 0;
  for (float x : a) s += x;
  for (; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

ReadPass TimedReadPass(const float* buf, int64_t n, BenchClock clock) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  const int threads = ThreadsForThisThread();
  std::vector<double> sums(threads, 0.0);
  const double start = ClockSeconds(clock);
  ParallelFor(threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t lo = n * t / threads;
      const int64_t hi = n * (t + 1) / threads;
      sums[t] = avx512 ? SumAvx512(buf + lo, hi - lo) : SumPortable(buf + lo, hi - lo);
    }
  });
  const double stop = ClockSeconds(clock);
  ReadPass pass;
  pass.seconds = stop - start;
  for (double s : sums) pass.checksum += s;
  return pass;
}

}  // namespace tandem::bench
