#include "bench/model/fma_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "common/parallel_for.h"

namespace tandem::bench {
namespace {

constexpr int kChains = 12;

// acc = acc·a + b per chain: every FMA depends on its chain's previous one only. acc converges
// to b / (1 − a) (finite); the sum is returned so the loop cannot be dropped.
__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t rounds) {
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(0.001f * static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t r = 0; r < rounds; ++r) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, acc[j]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) float FmaLoopAvx512(int64_t rounds) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(0.001f * static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t r = 0; r < rounds; ++r) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it (bug 105593)
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

float FmaLoop(CpuIsa isa, int64_t rounds) {
  return isa == CpuIsa::kAvx512 ? FmaLoopAvx512(rounds) : FmaLoopAvx2(rounds);
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

FmaPeak MeasureFmaPeak(CpuIsa isa, int64_t fmas_per_thread, int reps) {
  FmaPeak p;
  p.threads = ThreadsForThisThread();
  if (isa == CpuIsa::kPortable || !CpuSupports(isa)) return p;
  p.lanes = isa == CpuIsa::kAvx512 ? 16 : 8;
  const int64_t rounds = std::max<int64_t>(1, fmas_per_thread / kChains);
  const double flops = 2.0 * p.lanes * kChains * static_cast<double>(rounds);
  std::atomic<float> sink{0.f};
  FmaLoop(isa, rounds / 16 + 1);  // warm-up: wide vector units up to speed
  double one = 1e30, all = 1e30;
  for (int r = 0; r < std::max(1, reps); ++r) {
    auto t0 = std::chrono::steady_clock::now();
    sink.store(FmaLoop(isa, rounds), std::memory_order_relaxed);
    one = std::min(one, Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    ParallelFor(p.threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        sink.store(FmaLoop(isa, rounds), std::memory_order_relaxed);
    });
    all = std::min(all, Seconds(t0));
  }
  p.one_thread_gflops = flops / one / 1e9;
  p.all_threads_gflops = flops * p.threads / all / 1e9;
  return p;
}

}  // namespace tandem::bench
