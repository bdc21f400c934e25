// Data-parallel loops on the calling thread's persistent OpenMP team.
//
// Tandem's CPU kernels and oneDNN share one thread runtime (OpenMP, which Debian's oneDNN is
// built against), so the two never compete with two pools. Each rank thread of an instance
// chooses how many threads its kernels may use (SetThreadsForThisThread); a rank of a tp=9
// instance on 2 cores runs its loops inline.
//
// Thread-safety: every function may be called from any thread; the setting is per thread.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace tandem {

// Number of hardware threads available to this process (>= 1).
int HardwareThreads();

// Sets how many threads loops started from the calling thread may use (clamped to >= 1).
// Also applies to oneDNN primitives executed from this thread.
void SetThreadsForThisThread(int threads);
int ThreadsForThisThread();

// Calls fn(begin, end) over a partition of [0, n) into contiguous ranges of at least `grain`
// items, on up to ThreadsForThisThread() threads. Returns when every call has returned.
// fn must not throw. n <= 0 calls nothing.
void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

}  // namespace tandem
