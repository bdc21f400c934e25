// One Tandem instance: a process-local group of tp × pcp rank threads (docs/design.md#instances,
// #parallel-layout), each with its backend, weight shard, KV pool and communicators, executing
// forward steps together.
//
// Rank threads are persistent: created once, each runs its setup (backend, weights, pool) and
// then every step on the same thread, so per-thread state (OpenMP team, CUDA context) persists.
// Run() is serialised: one step at a time. If a step fails on any rank, every rank's
// communicators are aborted (so no peer waits forever) and the instance refuses further steps.
//
// Thread-safety: all public methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "attention/kv_dtype.h"
#include "attention/parallel_layout.h"
#include "common/kv_pool_memory.h"
#include "engine/rank_model.h"
#include "engine/step.h"
#include "model/format/llama_weights.h"

namespace tandem {

// Whether a pool_allocator's memory is the KV pool itself or a host mirror of it
// (docs/design.md#pools-and-ucx).
enum class KvStaging {
  kAuto,    // a mirror only when the backend's memory is not host memory (GPU pools)
  kAlways,  // a mirror even on the CPU backend: exercises the GPU path's staging on any machine
  kDevice,  // never a mirror: the allocator returns backend (device) memory the transport reaches
            // directly (GPU-direct KV, docs/gpu.md#gpu-direct-kv)
};

struct InstanceOptions {
  ParallelConfig parallel;
  InstanceRole role = InstanceRole::kCombined;
  KvDType kv_dtype = KvDType::kF32;
  int64_t kv_bytes_per_rank = int64_t{256} << 20;  // pool size budget of each rank
  int32_t threads_per_rank = 0;                    // 0: hardware threads / world (>= 1)
  std::string backend = "cpu";
  absl::Duration collective_timeout = absl::Minutes(2);
  absl::Duration step_timeout = absl::Minutes(10);
  // Memory the KV transfer can reach (UCX-registered). Empty: pools are plain backend memory.
  // Set: it holds the pools themselves, or — staged, see KvStaging — their host mirrors while
  // the pools live in backend memory.
  KvPoolAllocator pool_allocator;
  KvStaging kv_staging = KvStaging::kAuto;
  // Tests: builds rank r's backend instead of the registry's CreateBackend(backend, r) (`backend`
  // then only names the kind for BackendMemoryIsHost). Called on each rank's thread, all ranks
  // at once: state it shares needs a lock. Empty: the registry.
  std::function<absl::StatusOr<std::unique_ptr<ComputeBackend>>(int32_t rank)> make_backend;
};

ModelDims DimsOf(const LlamaConfig& config);

class Instance {
 public:
  // Validates the layout against the model (INVALID_ARGUMENT naming the rule), then starts the
  // rank threads and prepares weights and pools. `weights` is only read during Create.
  static absl::StatusOr<std::unique_ptr<Instance>> Create(const LlamaWeights& weights,
                                                          const InstanceOptions& options);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  // Runs one forward step; returns the logits of the requests that asked for them,
  // [count][vocab] row-major, in request order.
  absl::StatusOr<std::vector<float>> Run(const StepInput& input);

  const InstanceOptions& options() const { return options_; }
  const LlamaConfig& config() const { return config_; }
  ModelDims dims() const { return DimsOf(config_); }
  int32_t world() const { return options_.parallel.world(); }
  int32_t num_blocks() const { return num_blocks_; }
  // Bytes of one block in one rank's pool (every rank has the same local head count).
  int64_t block_bytes() const { return geometry_.block_bytes(); }
  const PoolGeometry& pool_geometry() const { return geometry_; }
  KvPoolView pool(int32_t rank) const;
  // Bytes of model weights rank `rank` holds (rank_weights.h; tensors shared between ranks of
  // one device count in each), and its quantised tensors kept as f32 because its slice cut
  // their blocks.
  int64_t weight_bytes(int32_t rank) const;
  const std::vector<std::string>& weight_f32_fallbacks(int32_t rank) const;

  // ---- KV staging (only when pool_allocator is set) ----
  // Staged: each rank's pool is backend memory and the transfer uses a host mirror with the
  // pool's layout (same offsets), so transfer plans apply to the mirror unchanged.
  bool staged() const { return staged_; }
  // What the KV transfer reads (prefill) or writes (decode) for `rank`: the mirror when staged,
  // else the pool.
  KvPoolView transfer_pool(int32_t rank) const;
  // Copy `blocks` (block ids, any order) of every rank's pool to its mirror — after the prefill
  // that wrote them, before their KV is served — or from the mirror into the pool — after a pull,
  // before a step attends them. No-ops when not staged. Serialised with Run, so never during a
  // step; a block id outside the pool is INVALID_ARGUMENT (nothing copied), a copy error breaks
  // the instance like a failed step.
  absl::Status StageOut(absl::Span<const int32_t> blocks);
  absl::Status StageIn(absl::Span<const int32_t> blocks);
  // Copies whole blocks within every rank's pool, (source, destination) pairs — the partial last
  // prompt block a choice of an n > 1 request gets before its first step writes into it
  // (engine/choice_blocks.h). Serialised with Run; INVALID_ARGUMENT for an id outside the pool
  // (nothing copied); a copy error breaks the instance like a failed step.
  absl::Status CopyBlocks(absl::Span<const std::pair<int32_t, int32_t>> copies);

 private:
  Instance(const LlamaConfig& config, const InstanceOptions& options);
  using Job = std::function<absl::Status(int32_t rank)>;
  // Runs job(rank) on every rank thread; returns the first error (and aborts all comms on error).
  absl::Status RunOnAllRanks(const Job& job);
  // RunOnAllRanks, one job at a time (steps and staging copies never overlap);
  // FAILED_PRECONDITION once the instance is broken.
  absl::Status RunSerialized(const Job& job);
  absl::Status Stage(absl::Span<const int32_t> blocks, bool to_mirror);
  void RankLoop(int32_t rank);

  const LlamaConfig config_;
  const InstanceOptions options_;
  PoolGeometry geometry_;
  int32_t num_blocks_ = 0;

  std::vector<std::unique_ptr<RankModel>> models_;      // [world], written during setup
  std::vector<std::unique_ptr<KvPoolMemory>> pools_;    // [world]
  std::vector<std::unique_ptr<KvPoolMemory>> mirrors_;  // [world] when staged_
  bool staged_ = false;
  std::vector<std::thread> threads_;

  absl::Mutex run_mu_;  // serialises Run
  absl::Mutex mu_;
  std::shared_ptr<const Job> job_ ABSL_GUARDED_BY(mu_);
  uint64_t job_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t jobs_done_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Status> results_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
