#include "common/parallel_for.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace tandem {
namespace {

// Threads loops started from this thread may use; 0 = not set (OpenMP's default).
thread_local int t_threads = 0;
// Set while this thread runs its share of a ParallelFor: a nested loop runs inline.
thread_local bool t_in_loop = false;
thread_local LoopTeam t_team = LoopTeam::kWorkers;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long an idle worker waits for the next loop before parking on a futex: spinning (the
// next GEMV of a decode step follows within microseconds), then yielding the core to anything
// else runnable (oneDNN's OpenMP team in a prefill), then sleeping. A parked worker costs the
// next loop a futex wake (tens of µs in a VM), a spinning one costs the hand-off a cache line.
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kYield = std::chrono::microseconds(300);

// The persistent workers of one calling thread. A loop publishes its body and bumps
// `generation_`; worker w runs share w + 1 of it, the caller share 0, and the caller spins until
// every worker has acknowledged (`pending_` at zero). Owned by the calling thread (thread_local),
// so loops of different rank threads never share workers and Run is never called concurrently.
class WorkerPool {
 public:
  explicit WorkerPool(int workers) {
    for (int w = 0; w < workers; ++w) workers_.emplace_back([this, w] { Loop(w); });
  }
  ~WorkerPool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    generation_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int workers() const { return static_cast<int>(workers_.size()); }

  // Calls fn(t) for every t in [0, threads) — t = 0 on the caller — and returns when all
  // returned. REQUIRES: 2 <= threads <= workers() + 1.
  void Run(int threads, absl::FunctionRef<void(int)> fn) {
    job_ = &fn;
    job_threads_ = threads;
    // Every worker acknowledges every loop (those beyond `threads` without running a share), so
    // none can still be reading job_ when the next loop overwrites it.
    pending_.store(workers(), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes job_ and job_threads_
    if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
    fn(0);
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 4096) {
        CpuRelax();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  void Loop(int index) {
    t_threads = 1;  // a loop started inside a share runs inline
    omp_set_num_threads(1);
    // Generation 0 is the one before any loop: the constructor starts the workers before Run can
    // be called, but a worker thread may first run after Run bumped generation_ (it must still
    // take that loop), so it must not read its starting point from generation_.
    uint32_t seen = 0;
    while (true) {
      seen = Await(seen);
      if (stop_.load(std::memory_order_relaxed)) return;
      if (index + 1 < job_threads_) (*job_)(index + 1);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  // Returns the first generation different from `seen`: spin, yield, then park.
  uint32_t Await(uint32_t seen) {
    auto start = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      const uint32_t g = generation_.load(std::memory_order_acquire);
      if (g != seen) return g;
      if ((spins & 63) != 63) {
        CpuRelax();
        continue;
      }
      const auto idle = std::chrono::steady_clock::now() - start;
      if (idle < kSpin) continue;
      if (idle < kYield) {
        std::this_thread::yield();
        continue;
      }
      // Announce the sleep before re-checking, so Run either sees a sleeper and notifies or
      // bumped the generation before this load (seq_cst orders the two pairs).
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (generation_.load(std::memory_order_seq_cst) == seen) {
        generation_.wait(seen, std::memory_order_seq_cst);
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      start = std::chrono::steady_clock::now();
    }
  }

  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  // The current loop; written by Run before it bumps generation_, read by workers after.
  const absl::FunctionRef<void(int)>* job_ = nullptr;
  int job_threads_ = 0;
};

// This thread's pool with at least `workers` workers (grown by replacing it).
WorkerPool& PoolFor(int workers) {
  thread_local std::unique_ptr<WorkerPool> pool;
  if (pool == nullptr || pool->workers() < workers) {
    pool.reset();
    pool = std::make_unique<WorkerPool>(workers);
  }
  return *pool;
}

}  // namespace

int HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void SetThreadsForThisThread(int threads) {
  t_threads = std::max(1, threads);
  omp_set_num_threads(t_threads);  // oneDNN's primitives run on this thread's OpenMP team
}

int ThreadsForThisThread() {
  return t_threads > 0 ? t_threads : std::max(1, omp_get_max_threads());
}

void SetLoopTeamForThisThread(LoopTeam team) { t_team = team; }
LoopTeam LoopTeamForThisThread() { return t_team; }

void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(ThreadsForThisThread(), max_chunks));
  if (threads <= 1 || t_in_loop) {
    fn(0, n);
    return;
  }
  if (t_team == LoopTeam::kOpenMp) {
    OmpParallelFor(n, grain, fn);
    return;
  }
  t_in_loop = true;
  PoolFor(threads - 1).Run(threads, [&](int t) {
    const int64_t begin = n * t / threads;
    const int64_t end = n * (t + 1) / threads;
    if (begin < end) fn(begin, end);
  });
  t_in_loop = false;
}

void OmpParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(ThreadsForThisThread(), max_chunks));
  if (threads <= 1 || t_in_loop) {
    fn(0, n);
    return;
  }
  t_in_loop = true;  // a loop started inside runs inline, as with the workers
#pragma omp parallel num_threads(threads)
  {
    t_in_loop = true;
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t begin = n * t / team;
    const int64_t end = n * (t + 1) / team;
    if (begin < end) fn(begin, end);
    t_in_loop = false;
  }
  t_in_loop = false;
}

}  // namespace tandem
