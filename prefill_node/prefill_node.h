// A prefill instance (docs/design.md#request-lifecycle, #lease-protocol): a TP×PCP instance whose
// KV pools a transport allocates and publishes as TransferMetadata (a KvSource from the injected
// KvSourceFactory: UCX in tandem-prefill, in-process fakes in tests), a PrefillEngine, and the
// lease table that holds each finished prompt's KV until a decode instance releases it or the lease
// expires. With the prefix cache on (--prefix_cache), full blocks of finished prompts stay cached
// after their lease ends and later prompts sharing the prefix reuse them (engine/prefix_cache.h,
// docs/prefix_cache.md); the KvHandle of such a prompt names the cached blocks too, so the decode
// side pulls the whole prompt.
//
// Thread-safety: all public methods are thread-safe (gRPC handlers call them concurrently).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cancellation.h"
#include "engine/block_manager.h"
#include "engine/instance.h"
#include "engine/prefill_engine.h"
#include "engine/prefix_cache.h"
#include "kv_transfer/kv_source.h"
#include "kv_transfer/transfer_types.h"
#include "model/format/model_loader.h"
#include "prefill_node/early_releases.h"
#include "prefill_node/kv_chunk_checks.h"
#include "prefill_node/kv_progress.h"
#include "prefill_node/lease_table.h"

namespace tandem {

struct PrefillNodeOptions {
  std::string model_path;
  std::string model_name;          // served name; empty = the model's own name
  std::string engine_id;           // empty = generated
  std::string advertised_address;  // what KvHandles name as prefill_address
  InstanceOptions instance;        // role is forced to kPrefill
  PrefillOptions prefill;
  absl::Duration default_lease = absl::Seconds(30);
  absl::Duration max_lease = absl::Minutes(5);
  // tandem-prefill's --prefix_cache is on by default (docs/prefix_cache.md); a node built in
  // process (tests) opts in.
  bool prefix_cache = false;
  int64_t prefix_cache_max_blocks = 0;  // 0: as many as the pool holds
  // KV digests in every handle (docs/kv_transfer.md "Provable KV"); off only to measure their
  // cost (tandem-prefill --kv_digests).
  bool kv_digests = true;
  // Testing only (fault injection, tandem-prefill --testing_flip_kv_byte): flip one byte of
  // the KV of each of the first N prompts after their digests are computed — the first byte of
  // rank 0's slab of the prompt's last block (a prompt byte: DCP rank 0 owns the block's first
  // token; and a partial last block is never in the prefix cache) — so the decode node's check
  // must catch it.
  int32_t testing_flip_kv_byte = 0;
  KvSourceFactory sources;  // required: the transport that allocates and publishes the pools
};

struct PrefillOutcome {
  int32_t first_token = 0;
  TokenLogprobs first_logprobs;  // first_token's, with sampling.logprobs >= 0
  // choices > 1: every choice's first token and log-probabilities (PrefillResult's).
  std::vector<int32_t> choice_tokens;
  std::vector<TokenLogprobs> choice_logprobs;
  std::vector<int32_t> block_table;
  int64_t num_tokens = 0;
  int64_t cached_tokens = 0;  // of num_tokens, served from the prefix cache
  uint64_t generation = 0;
  absl::Time lease_expiry;
  // Parallel to block_table: each block's generation when the lease was taken (fencing).
  std::vector<uint32_t> block_generations;
  // KV digests (kv_transfer/kv_digest.h), empty with kv_digests off or for an early handle
  // (StartPipelined: the final KvProgress carries them).
  std::vector<uint32_t> kv_digests;
};

struct NodeLoad {
  // free_blocks counts blocks only the prefix cache holds: they are reclaimed on demand.
  int32_t running = 0, queued = 0, free_blocks = 0, total_blocks = 0, leases = 0;
  int64_t block_free_errors = 0;  // BlockManager::free_errors()
  // Since start: leases that expired unreleased, and leases released while held.
  int64_t leases_expired_total = 0, leases_released_total = 0;
  // Since start: leases released as they were taken, their request id released before
  // (ReleaseKv by request id while the prefill ran). Not counted in leases_released_total.
  int64_t leases_released_early_total = 0;
  // Prefix cache (all 0 when it is off): cumulative prompt tokens looked up / served from the
  // cache / computed, blocks evicted; blocks cached now.
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0, computed_prompt_tokens = 0;
  int64_t prefix_evictions = 0, prefix_cached_blocks = 0;
  // Cached blocks a hit found changed since their first write (dropped, computed again).
  int64_t prefix_corrupt_blocks = 0;
  int64_t pending_prompt_tokens = 0;  // PrefillEngine::pending_prompt_tokens
};

// One Prefill or StartPipelined call as the node runs it: what the service reads from a
// v1::PrefillRequest and the call's deadline (the client's cancel travels apart, as a token).
struct PrefillCall {
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  // Sampling draw number of the token sampled here; a resume's prompt ends with its last
  // sample_step generated tokens (engine/prefill_engine.h PrefillJob).
  uint64_t sample_step = 0;
  // The decode side's budget (first token included): prompt + max_new_tokens must fit the
  // context, checked here so a request that cannot be decoded takes no lease.
  int32_t max_new_tokens = 1;
  absl::Duration lease = absl::ZeroDuration();  // zero or less: the node's default; capped
  absl::Time deadline = absl::InfiniteFuture();
  // Prefill only (n > 1 from one prefill): a first token for each choice, choice i sampled with
  // sampling.seed + i (PrefillOutcome::choice_tokens). StartPipelined refuses more than 1.
  int32_t choices = 1;
};

class PrefillNode {
 public:
  static absl::StatusOr<std::unique_ptr<PrefillNode>> Create(PrefillNodeOptions options);
  ~PrefillNode();
  PrefillNode(const PrefillNode&) = delete;
  PrefillNode& operator=(const PrefillNode&) = delete;

  // Runs the prefill and takes a lease on its KV. Once `cancel` is cancelled the request is
  // cancelled in the engine at once (blocks freed) and CANCELLED returned. Waits at most
  // until call.deadline. INVALID_ARGUMENT for bad prompts/sampling/budgets, RESOURCE_EXHAUSTED
  // past the queue timeout.
  absl::StatusOr<PrefillOutcome> Prefill(PrefillCall call, const CancellationToken& cancel);

  // Pipelined transfer (docs/kv_transfer.md): like Prefill, but answers as soon as the prompt
  // has its KV blocks, with a lease on them taken now (first_token unset, num_tokens = the prompt
  // length); the prefill goes on without the caller and WatchKv reports its progress. Waiting for
  // blocks is bounded and cancelled like Prefill. Releasing the lease (or its expiry) while the
  // prefill runs cancels it; the lease's blocks stay allocated until the prefill has stopped.
  // INVALID_ARGUMENT for call.choices > 1 (the caller needs the first tokens).
  absl::StatusOr<PrefillOutcome> StartPipelined(PrefillCall call, const CancellationToken& cancel);
  // The progress of the pipelined prefill holding lease `generation` of `request_id`, kept until
  // its lease ends; ABORTED when there is none (unknown, failed, released or expired).
  absl::StatusOr<std::shared_ptr<const KvProgress>> WatchKv(const std::string& request_id,
                                                            uint64_t generation) const;

  // True when the lease was still held (the blocks are freed either way).
  //
  // generation 0 releases by request id (epoch 0 or this instance's): every lease of
  // `request_id`, or, when it holds none but a prefill of that id is running, the lease that
  // prefill takes — released as soon as it is taken, and that Prefill returns CANCELLED
  // (EarlyReleases; remembered only until that prefill ends, so a later request reusing the id
  // keeps its lease). The router sends it after giving up on a Prefill call whose answer may be
  // on its way.
  //
  // Generation fencing: with `handle_blocks` and `handle_generations` (the KvHandle's, as the
  // decode side quotes them) a held lease also reports false when any of those blocks was freed
  // since the lease was taken (BlockManager::FreedSince), whatever the lease table says — and
  // does not free those again; KV read from a block a bookkeeping bug let another request reuse
  // is discarded.
  bool ReleaseKv(const std::string& request_id, uint64_t epoch, uint64_t generation,
                 absl::Span<const int32_t> handle_blocks = {},
                 absl::Span<const uint32_t> handle_generations = {});
  // Testing only (fault injection): frees lease `generation`'s blocks while the lease stays
  // held — the bookkeeping bug generation fencing exists for. False when no such lease.
  bool TestOnlyFreeLeasedBlocks(uint64_t generation);
  // Blocks whose digest checks were computed as the engine wrote them (KvChunkChecks), total.
  int64_t kv_blocks_checked_as_written() const { return kv_blocks_checked_as_written_.load(); }
  // Wall time spent computing KV digests, total: the checks as the engine wrote each chunk and
  // the final pass binding them (Digests); 0 with kv_digests off. Not counted: the prefix
  // cache's re-read of a hit's blocks (it runs with digests off too).
  absl::Duration kv_digest_compute_time() const {
    return absl::Nanoseconds(kv_digest_compute_nanos_.load());
  }
  // Testing only: the pool of global rank `rank`, to corrupt KV under a live handle.
  KvPoolMemory& TestOnlyPool(int32_t rank) const { return source_->pool(rank); }
  std::optional<absl::Time> RenewLease(const std::string& request_id, uint64_t generation,
                                       absl::Duration extend);

  const TransferMetadata& metadata() const { return source_->metadata(); }
  const std::string& engine_id() const { return engine_id_; }
  uint64_t epoch() const { return epoch_; }
  const std::string& model_name() const { return model_name_; }
  const std::string& advertised_address() const { return options_.advertised_address; }
  KvLayout layout() const;
  NodeLoad Load() const;
  // The prefix cache's digest (at most `max_hashes` hashes, most recently used first), or nullopt
  // when the cache is off.
  std::optional<PrefixCacheDigestView> PrefixDigest(int32_t max_hashes) const;
  // Bytes of model weights each rank holds (Instance::weight_bytes), in rank order.
  std::vector<int64_t> weight_bytes_per_rank() const {
    std::vector<int64_t> out;
    for (int32_t r = 0; r < instance_->world(); ++r) out.push_back(instance_->weight_bytes(r));
    return out;
  }
  absl::Time started() const { return started_; }
  absl::Duration default_lease() const { return options_.default_lease; }

 private:
  explicit PrefillNode(PrefillNodeOptions options);
  void ReapLoop();
  // ReleaseKv with generation 0.
  bool ReleaseRequest(const std::string& request_id);
  void EndPrefilling(const std::string& request_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After engine_->Submit: a refused submission ends the request's prefilling count and is
  // returned; else waits for `done`, asking the engine to cancel once when `cancel` is cancelled
  // (at once, from its OnCancel callback) or the deadline passes (the engine still answers, so
  // the wait ends).
  absl::Status AwaitSubmitted(const absl::Status& submitted, absl::Notification& done,
                              const std::string& request_id, absl::Time deadline,
                              const CancellationToken& cancel);
  // Pipelined prefills whose lease is no longer held: removed from pipelines_, their progress
  // failed with `why` (when not final) and their prefill cancelled. Returns them for the caller to
  // cancel outside mu_.
  std::vector<std::string> DropPipelinesWithoutLease(const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelPrefills(const std::vector<std::string>& request_ids);
  // testing_flip_kv_byte: flips the first byte of `block` on rank 0 while flips are left.
  void MaybeFlipKvByte(int32_t block);
  // Digests of a leased prompt's KV, or an empty list with kv_digests off. `written`: the checks
  // computed as the engine wrote each chunk (KvChunkChecks); only blocks without checks (the
  // partial last one) are read here.
  absl::StatusOr<std::vector<uint32_t>> Digests(const std::string& request_id,
                                                uint64_t lease_generation,
                                                const std::vector<int32_t>& blocks,
                                                const std::vector<uint32_t>& block_generations,
                                                int64_t num_tokens,
                                                const KvChunkChecks* written) const;
  // With kv_digests: a KvChunkChecks for a prompt of num_tokens, and the engine hook that fills
  // it as each chunk's KV is written (PrefillJob::on_kv_written).
  std::shared_ptr<KvChunkChecks> HookChunkChecks(PrefillJob& req, int64_t num_tokens);
  // The engine's job for `call` (its prompt moved there), once its budget is checked against the
  // context; sets call.lease to what this node grants. Shared by Prefill and StartPipelined.
  absl::StatusOr<PrefillJob> JobFor(PrefillCall& call) const;

  struct Pipeline {
    std::string request_id;
    std::shared_ptr<KvProgress> progress;
  };

  PrefillNodeOptions options_;
  std::string engine_id_;
  uint64_t epoch_ = 0;
  std::string model_name_;
  absl::Time started_;
  LlamaConfig config_;

  std::unique_ptr<KvSource> source_;  // owns the pools: destroyed after the instance
  std::unique_ptr<Instance> instance_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // null when off; destroyed after the engine
  std::unique_ptr<PrefillEngine> engine_;

  mutable absl::Mutex mu_;
  LeaseTable leases_ ABSL_GUARDED_BY(mu_);
  EarlyReleases early_releases_ ABSL_GUARDED_BY(mu_);
  // Request id -> Prefill calls of that id submitted to the engine and not yet completed.
  absl::flat_hash_map<std::string, int32_t> prefilling_ ABSL_GUARDED_BY(mu_);
  // Lease generation -> pipelined prefill holding it (StartPipelined), until the lease ends.
  absl::flat_hash_map<uint64_t, Pipeline> pipelines_ ABSL_GUARDED_BY(mu_);
  int64_t leases_released_early_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t kv_bytes_flipped_ ABSL_GUARDED_BY(mu_) = 0;  // testing_flip_kv_byte
  std::atomic<int64_t> kv_blocks_checked_as_written_{0};
  mutable std::atomic<int64_t> kv_digest_compute_nanos_{0};  // Digests is const
  int64_t leases_expired_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t leases_released_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace tandem
