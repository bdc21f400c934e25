// Data-parallel loops on persistent per-thread workers.
//
// Each thread that starts a loop owns its own workers (created on first use, one fewer than the
// loop's threads; the calling thread runs the first share). Between loops a worker spins for
// ~50 µs, then yields for a while, then parks on a futex, so the back-to-back loops of a decode
// step hand off in a cache-line round trip instead of a futex wake each (libgomp's teams slept
// between them: ~14,000 context switches per second of batch-1 decode and one core idle).
// oneDNN keeps its own OpenMP team; SetThreadsForThisThread sets both. Each rank thread of an
// instance chooses how many threads its loops may use; a rank of a tp=9 instance on 2 cores runs
// its loops inline.
//
// Thread-safety: every function may be called from any thread; the setting and the workers are
// per thread. A loop started from inside a loop body runs inline on the thread that started it.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace tandem {

// Number of hardware threads available to this process (>= 1).
int HardwareThreads();

// Sets how many threads loops started from the calling thread may use (clamped to >= 1).
// Also applies to oneDNN primitives executed from this thread (OpenMP's thread count).
void SetThreadsForThisThread(int threads);
int ThreadsForThisThread();

// Calls fn(begin, end) over a partition of [0, n) into contiguous ranges of at least `grain`
// items, on up to ThreadsForThisThread() threads. Returns when every call has returned.
// fn must not throw. n <= 0 calls nothing.
void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

// Which threads run this thread's ParallelFor loops. kWorkers (default): the persistent workers
// above, whose hand-off suits decode's many short loops. kOpenMp: this thread's OpenMP team, the
// one oneDNN's GEMMs run on — for steps whose linear layers are oneDNN GEMMs (prefill), so the
// loops between two GEMMs (attention, norms, tile dequantisation) find the team awake and leave
// no idle team spinning on the cores the workers need (on 2 cores prefill of 512 tokens ran at
// 600 tok/s with the two teams alternating, 950 with one). Per thread, like the thread count.
enum class LoopTeam { kWorkers, kOpenMp };
void SetLoopTeamForThisThread(LoopTeam team);
LoopTeam LoopTeamForThisThread();

// ParallelFor on this thread's OpenMP team whatever LoopTeamForThisThread() says: for work that
// sits between oneDNN primitives in every step.
void OmpParallelFor(int64_t n, int64_t grain,
                    absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

}  // namespace tandem
