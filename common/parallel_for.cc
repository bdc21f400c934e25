#include "common/parallel_for.h"

#include <omp.h>

#include <algorithm>
#include <thread>

namespace tandem {

int HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void SetThreadsForThisThread(int threads) { omp_set_num_threads(std::max(1, threads)); }

int ThreadsForThisThread() { return std::max(1, omp_get_max_threads()); }

void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(ThreadsForThisThread(), max_chunks));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t begin = n * t / threads;
    const int64_t end = n * (t + 1) / threads;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace tandem
