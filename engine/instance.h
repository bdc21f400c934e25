// One Tandem instance: a process-local group of tp × pcp rank threads (DESIGN.md §1, §3), each
// with its backend, weight shard, KV pool and communicators, executing forward steps together.
//
// Rank threads are persistent: created once, each runs its setup (backend, weights, pool) and
// then every step on the same thread, so per-thread state (OpenMP team, CUDA context) persists.
// Run() is serialised: one step at a time. If a step fails on any rank, every rank's
// communicators are aborted (so no peer waits forever) and the instance refuses further steps.
//
// Thread-safety: all public methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "attention/kv_dtype.h"
#include "attention/parallel_layout.h"
#include "engine/kv_pool_memory.h"
#include "engine/rank_model.h"
#include "engine/step.h"
#include "model/format/llama_weights.h"

namespace tandem {

struct InstanceOptions {
  ParallelConfig parallel;
  InstanceRole role = InstanceRole::kCombined;
  KvDType kv_dtype = KvDType::kF32;
  int64_t kv_bytes_per_rank = int64_t{256} << 20;  // pool size budget of each rank
  int32_t threads_per_rank = 0;                    // 0: hardware threads / world (>= 1)
  std::string backend = "cpu";
  absl::Duration collective_timeout = absl::Minutes(2);
  absl::Duration step_timeout = absl::Minutes(10);
  KvPoolAllocator pool_allocator;  // empty: backend memory
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

 private:
  Instance(const LlamaConfig& config, const InstanceOptions& options);
  using Job = std::function<absl::Status(int32_t rank)>;
  // Runs job(rank) on every rank thread; returns the first error (and aborts all comms on error).
  absl::Status RunOnAllRanks(const Job& job);
  void RankLoop(int32_t rank);

  const LlamaConfig config_;
  const InstanceOptions options_;
  PoolGeometry geometry_;
  int32_t num_blocks_ = 0;

  std::vector<std::unique_ptr<RankModel>> models_;      // [world], written during setup
  std::vector<std::unique_ptr<KvPoolMemory>> pools_;    // [world]
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
