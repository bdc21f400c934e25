#include "prefill_node/prefill_node.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/prefix_hash.h"
#include "common/request_checks.h"
#include "common/status_macros.h"
#include "kv_transfer/kv_digest.h"
#include "model/guided_sampling.h"

namespace tandem {
namespace {

// One wait of a handler for the engine's answer to a request it cancelled (the engine answers
// at its next step boundary; nothing is polled at this interval).
constexpr absl::Duration kEngineAnswerBound = absl::Seconds(1);

std::vector<absl::Span<const std::byte>> PoolViews(const KvSource& source) {
  std::vector<absl::Span<const std::byte>> pools;
  for (int32_t r = 0; r < source.world(); ++r) {
    const KvPoolMemory& p = source.pool(r);
    pools.emplace_back(static_cast<const std::byte*>(p.base()), static_cast<size_t>(p.bytes()));
  }
  return pools;
}

// Request ids released while their prefill ran (EarlyReleases): each is used up when that
// prefill ends, normally within its own deadline, far sooner than the TTL; the bounds only cap
// what a flood of releases could hold (an id is ~50 bytes: under a MiB).
constexpr size_t kEarlyReleaseCapacity = 8192;
constexpr absl::Duration kEarlyReleaseTtl = absl::Minutes(2);

// Everything that makes this instance's KV for the same tokens differ from another's: the model's
// content, the KV byte layout (dims, dtype, protocol version) and the parallel layout (tp, pcp,
// dcp, block size, interleave) — a cached block is one virtual block in this exact layout.
std::string PrefixCacheIdentity(const std::string& model_identity, const KvLayout& layout) {
  return absl::StrCat("model=", model_identity, ";layers=", layout.dims.num_layers,
                      ";q_heads=", layout.dims.num_q_heads, ";kv_heads=", layout.dims.num_kv_heads,
                      ";head_dim=", layout.dims.head_dim,
                      ";dtype=", std::string(KvDTypeName(layout.dtype)),
                      ";kv_protocol=", kKvProtocolVersion, ";", layout.parallel.ToString());
}

uint64_t RandomEpoch() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
}

}  // namespace

PrefillNode::PrefillNode(PrefillNodeOptions options)
    : options_(std::move(options)), early_releases_(kEarlyReleaseCapacity, kEarlyReleaseTtl) {}

PrefillNode::~PrefillNode() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
  // The engine's scheduler runs this node's completion callbacks (they lock mu_, end leases and
  // free blocks), and its destructor fails what is still queued or running through them — a
  // pipelined prefill keeps running after its StartPipelined call returned. Stop it while the
  // members those callbacks use are alive (members are destroyed after this body, engine_
  // among the first).
  engine_.reset();
}

absl::StatusOr<std::unique_ptr<PrefillNode>> PrefillNode::Create(PrefillNodeOptions options) {
  options.instance.role = InstanceRole::kPrefill;
  std::unique_ptr<PrefillNode> node(new PrefillNode(std::move(options)));
  const PrefillNodeOptions& o = node->options_;
  if (!o.sources) {
    return absl::InvalidArgumentError("PrefillNode needs a KV source factory (PrefillNodeOptions)");
  }
  TANDEM_ASSIGN_OR_RETURN(LoadedModel model, LoadModel(o.model_path));
  node->config_ = model.weights.config;
  node->model_name_ = o.model_name.empty() ? model.weights.config.name : o.model_name;
  node->epoch_ = RandomEpoch();
  node->engine_id_ =
      o.engine_id.empty() ? absl::StrCat("prefill-", o.advertised_address) : o.engine_id;
  const ModelDims dims = DimsOf(model.weights.config);
  TANDEM_RETURN_IF_ERROR(ValidateParallelConfig(o.instance.parallel, dims, InstanceRole::kPrefill));

  KvLayout layout{o.instance.parallel, dims, o.instance.kv_dtype};
  const PoolGeometry geom = RankPoolGeometry(layout, 0);
  const int64_t blocks = o.instance.kv_bytes_per_rank / geom.block_bytes();
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV budget of ", o.instance.kv_bytes_per_rank,
                                                   " bytes per rank is below one block (",
                                                   geom.block_bytes(), " bytes)"));
  }
  KvSourceOptions so;
  so.engine_id = node->engine_id_;
  so.epoch = node->epoch_;
  so.compat_hash = CompatibilityHash(model.identity, layout);
  so.layout = layout;
  so.pool_bytes_per_rank = PoolBytes(geom, blocks);
  TANDEM_ASSIGN_OR_RETURN(node->source_, o.sources(so));
  // Device pools (GPU-direct KV) are not host memory: whatever reads KV on the host cannot run.
  const bool device_pools =
      std::any_of(node->source_->metadata().ranks.begin(), node->source_->metadata().ranks.end(),
                  [](const RankTransferInfo& r) { return r.memory_type != KvMemoryType::kHost; });
  if (device_pools && (o.kv_digests || o.prefix_cache || o.testing_flip_kv_byte > 0)) {
    return absl::InvalidArgumentError(
        "device KV pools (--kv_gpu_direct) cannot be read on the host: start tandem-prefill "
        "with --kv_digests=false and --prefix_cache=false (both read KV on the host)");
  }

  InstanceOptions io = o.instance;
  KvSource* source = node->source_.get();
  io.pool_allocator = [source](int32_t rank, int64_t bytes) {
    return source->BorrowPool(rank, bytes);
  };
  TANDEM_ASSIGN_OR_RETURN(node->instance_, Instance::Create(model.weights, io));
  node->blocks_ = std::make_unique<BlockManager>(node->instance_->num_blocks());
  if (o.prefix_cache) {
    PrefixCacheOptions pc;
    pc.salt = PrefixSalt(PrefixCacheIdentity(model.identity, layout));
    pc.block_tokens = VirtualBlockTokens(o.instance.parallel.dcp_geometry());
    pc.max_blocks = o.prefix_cache_max_blocks;
    // Issue 28: a hit re-reads each cached block against the checks of its first write, so KV
    // corrupted while cached is computed again rather than digested as-is and served.
    pc.verify = [source, layout](int32_t block, absl::Span<const uint32_t> checks) {
      const absl::StatusOr<KvBlockChecks> now =
          ComputeKvBlockChecks(layout, PoolViews(*source), block);
      if (now.ok() && absl::MakeConstSpan(*now) == checks) return true;
      const std::string line = absl::StrCat(
          "tandem-prefill: prefix cache: block ", block, " no longer matches the checks of its ",
          "first write (", now.ok() ? "corrupted while cached" : now.status().ToString(),
          "); dropped, its tokens will be computed again\n");
      std::fwrite(line.data(), 1, line.size(), stderr);
      return false;
    };
    node->prefix_cache_ = std::make_unique<PrefixCache>(node->blocks_.get(), pc);
  }
  PrefillOptions prefill = o.prefill;
  prefill.grammars = MakeGrammarCache(model.tokenizer.get());  // docs/structured_output.md
  node->engine_ = std::make_unique<PrefillEngine>(node->instance_.get(), node->blocks_.get(),
                                                  prefill, node->prefix_cache_.get());
  node->started_ = absl::Now();
  node->reaper_ = std::thread([raw = node.get()] { raw->ReapLoop(); });
  return node;
}

std::optional<PrefixCacheDigestView> PrefillNode::PrefixDigest(int32_t max_hashes) const {
  if (prefix_cache_ == nullptr) return std::nullopt;
  return prefix_cache_->Digest(max_hashes);
}

KvLayout PrefillNode::layout() const {
  return KvLayout{options_.instance.parallel, DimsOf(config_), options_.instance.kv_dtype};
}

NodeLoad PrefillNode::Load() const {
  NodeLoad l;
  l.running = engine_->running();
  l.queued = engine_->queued();
  l.free_blocks = prefix_cache_ != nullptr ? prefix_cache_->free_blocks() : blocks_->free_blocks();
  l.computed_prompt_tokens = engine_->computed_tokens();
  l.pending_prompt_tokens = engine_->pending_prompt_tokens();
  if (prefix_cache_ != nullptr) {
    const PrefixCacheStats s = prefix_cache_->stats();
    l.prefix_query_tokens = s.query_tokens;
    l.prefix_hit_tokens = s.hit_tokens;
    l.prefix_evictions = s.evictions;
    l.prefix_cached_blocks = s.blocks;
    l.prefix_corrupt_blocks = s.corrupt_blocks;
  }
  l.total_blocks = blocks_->total_blocks();
  l.block_free_errors = blocks_->free_errors();
  absl::MutexLock lock(&mu_);
  l.leases = leases_.size();
  l.leases_expired_total = leases_expired_;
  l.leases_released_total = leases_released_;
  l.leases_released_early_total = leases_released_early_;
  return l;
}

absl::StatusOr<PrefillJob> PrefillNode::JobFor(PrefillCall& call) const {
  // The decode side adds max_new_tokens positions, so they must fit the context too.
  TANDEM_RETURN_IF_ERROR(CheckTokenBudget(call.max_new_tokens, "max_new_tokens", 0));
  TANDEM_RETURN_IF_ERROR(CheckContextFit(static_cast<int64_t>(call.prompt.size()),
                                         call.max_new_tokens, "max_new_tokens",
                                         config_.max_context));
  call.lease = call.lease <= absl::ZeroDuration() ? options_.default_lease
                                                  : std::min(call.lease, options_.max_lease);
  PrefillJob req;
  req.id = call.request_id;
  req.prompt = std::move(call.prompt);
  req.sampling = call.sampling;
  req.sample_step = call.sample_step;
  return req;
}

absl::StatusOr<PrefillOutcome> PrefillNode::Prefill(PrefillCall call,
                                                    const CancellationToken& cancel) {
  TANDEM_ASSIGN_OR_RETURN(PrefillJob req, JobFor(call));
  req.choices = call.choices;
  const std::string& request_id = call.request_id;
  const absl::Duration lease = call.lease;
  const absl::Time deadline = call.deadline;
  struct Wait {
    absl::Notification done;
    absl::StatusOr<PrefillOutcome> outcome = absl::UnknownError("pending");
  };
  auto wait = std::make_shared<Wait>();
  const std::shared_ptr<KvChunkChecks> chunk_checks =
      HookChunkChecks(req, static_cast<int64_t>(req.prompt.size()));
  {
    absl::MutexLock lock(&mu_);
    ++prefilling_[request_id];
  }
  // The lease is taken inside the engine callback, so the blocks are owned by the lease table
  // from the instant the prefill finishes, whatever the handler does next.
  const absl::Status submitted = engine_->Submit(
      std::move(req), [this, wait, request_id, lease](absl::StatusOr<PrefillResult> r) {
        PrefillOutcome out;
        bool released_early;
        {
          absl::MutexLock lock(&mu_);
          EndPrefilling(request_id);
          // A release by request id that came while this prefill ran is used up by it, whatever
          // its outcome: it must not outlive it.
          released_early = early_releases_.Take(request_id, absl::Now()) && r.ok();
          if (r.ok()) {
            out.first_token = r->first_token;
            out.first_logprobs = std::move(r->first_logprobs);
            out.choice_tokens = std::move(r->choice_tokens);
            out.choice_logprobs = std::move(r->choice_logprobs);
            out.num_tokens = r->num_tokens;
            out.cached_tokens = r->cached_tokens;
            out.lease_expiry = absl::Now() + lease;
            out.block_table = r->block_table;
            if (released_early) {
              ++leases_released_early_;
            } else {
              // The engine still holds the blocks here: these are the generations the KV was
              // written under.
              out.block_generations = *blocks_->Generations(r->block_table);
              out.generation = leases_.Add(request_id, std::move(r->block_table), out.lease_expiry);
            }
          }
        }
        if (!r.ok()) {
          wait->outcome = r.status();
        } else if (released_early) {
          blocks_->Release(r->block_table);
          wait->outcome = absl::CancelledError(
              "prefill finished after its KV was released by request id (the router had given "
              "up on this call)");
        } else {
          wait->outcome = std::move(out);
        }
        wait->done.Notify();
      });
  TANDEM_RETURN_IF_ERROR(AwaitSubmitted(submitted, wait->done, request_id, deadline, cancel));
  if (wait->outcome.ok()) {
    // Bound on this handler thread, not the engine's (the lease keeps the blocks as written):
    // the full blocks' checks were computed as the engine wrote them; the last block is read.
    PrefillOutcome& o = *wait->outcome;
    absl::StatusOr<std::vector<uint32_t>> digests =
        Digests(request_id, o.generation, o.block_table, o.block_generations, o.num_tokens,
                chunk_checks.get());
    if (!digests.ok()) {
      ReleaseKv(request_id, epoch_, o.generation);
      return absl::InternalError(
          absl::StrCat("cannot compute the KV digests: ", digests.status().message()));
    }
    o.kv_digests = *std::move(digests);
    MaybeFlipKvByte(o.block_table.back());
  }
  if (wait->outcome.ok() && (cancel.cancelled() || absl::Now() > deadline)) {
    // Finished, but nobody will take the KV: free it now rather than at lease expiry.
    ReleaseKv(request_id, epoch_, wait->outcome->generation);
    return cancel.cancelled() ? absl::CancelledError("prefill cancelled by the client")
                              : absl::DeadlineExceededError("prefill finished after the deadline");
  }
  return std::move(wait->outcome);
}

absl::Status PrefillNode::AwaitSubmitted(const absl::Status& submitted, absl::Notification& done,
                                         const std::string& request_id, absl::Time deadline,
                                         const CancellationToken& cancel) {
  if (!submitted.ok()) {
    absl::MutexLock lock(&mu_);
    EndPrefilling(request_id);
    return submitted;
  }
  // The client's cancel reaches the engine from the canceller's thread, at once; the handle goes
  // before this returns, so no later request of the same id is touched.
  const CancelCallback on_cancel =
      cancel.OnCancel([this, &request_id] { engine_->Cancel(request_id); });
  if (!done.WaitForNotificationWithDeadline(deadline)) {
    engine_->Cancel(request_id);
    // The engine answers a cancelled request at its next step boundary; this bounds the wait
    // only against an engine that stopped stepping.
    while (!done.WaitForNotificationWithTimeout(kEngineAnswerBound)) {
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PrefillOutcome> PrefillNode::StartPipelined(PrefillCall call,
                                                           const CancellationToken& cancel) {
  if (call.choices > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n > 1 needs the first tokens in the answer: not with early_handle (a pipelined "
        "prefill answers before them); n = ",
        call.choices));
  }
  TANDEM_ASSIGN_OR_RETURN(PrefillJob req, JobFor(call));
  const std::string& request_id = call.request_id;
  const absl::Duration lease = call.lease;
  const absl::Time deadline = call.deadline;
  // `answered`, `generation` and `outcome` are written only by the engine's callbacks (its
  // scheduler thread), and read by this handler after `done`.
  struct Wait {
    absl::Notification done;
    bool answered = false;
    uint64_t generation = 0;                  // 0: no lease was taken
    std::vector<int32_t> blocks;              // the lease's, from admission
    std::vector<uint32_t> block_generations;  // parallel to blocks
    absl::StatusOr<PrefillOutcome> outcome = absl::UnknownError("pending");
  };
  auto wait = std::make_shared<Wait>();
  auto progress = std::make_shared<KvProgress>();
  const int64_t num_tokens = static_cast<int64_t>(req.prompt.size());
  // Checks of each chunk's blocks are computed before the chunk is published (on_kv_written
  // runs before on_progress).
  const std::shared_ptr<KvChunkChecks> chunk_checks = HookChunkChecks(req, num_tokens);
  req.on_progress = [this, wait, progress, request_id, lease, num_tokens](
                        const std::vector<int32_t>& blocks, int64_t tokens_ready) {
    progress->Advance(tokens_ready);
    if (wait->answered) return;
    // Admitted: the lease takes its own reference on the blocks, so releasing it while the
    // prefill still writes them frees nothing under the engine.
    wait->answered = true;
    if (const absl::Status s = blocks_->AddRef(blocks); !s.ok()) {
      wait->outcome = absl::InternalError(
          absl::StrCat("cannot lease the KV blocks of a pipelined prefill: ", s.message()));
      wait->done.Notify();
      return;
    }
    PrefillOutcome out;
    out.block_table = blocks;
    out.block_generations = *blocks_->Generations(blocks);
    out.num_tokens = num_tokens;
    out.cached_tokens = tokens_ready;
    out.lease_expiry = absl::Now() + lease;
    {
      absl::MutexLock lock(&mu_);
      out.generation = leases_.Add(request_id, blocks, out.lease_expiry);
      pipelines_[out.generation] = Pipeline{request_id, progress};
    }
    wait->generation = out.generation;
    wait->blocks = out.block_table;
    wait->block_generations = out.block_generations;
    wait->outcome = std::move(out);
    wait->done.Notify();
  };
  {
    absl::MutexLock lock(&mu_);
    ++prefilling_[request_id];
  }
  const absl::Status submitted = engine_->Submit(
      std::move(req), [this, wait, progress, request_id, lease, chunk_checks,
                       logprobs = call.sampling.logprobs >= 0](absl::StatusOr<PrefillResult> r) {
        // The engine's reference (a successful result's table): the lease holds its own.
        if (r.ok()) blocks_->Release(r->block_table);
        const uint64_t gen = wait->generation;
        absl::Status failure = r.status();
        std::optional<std::vector<int32_t>> lease_blocks;
        {
          absl::MutexLock lock(&mu_);
          EndPrefilling(request_id);
          if (early_releases_.Take(request_id, absl::Now()) && failure.ok()) {
            failure = absl::CancelledError(
                "prefill finished after its KV was released by request id (the router had "
                "given up on this call)");
            if (gen != 0 && leases_.Holds(gen)) ++leases_released_early_;
          }
          if (gen != 0) {
            if (!failure.ok()) {
              lease_blocks = leases_.Release(request_id, gen);
            } else if (!leases_.Renew(request_id, gen, absl::Now() + lease).has_value()) {
              failure = absl::AbortedError(
                  "the KV lease of this pipelined prefill was released or expired before it "
                  "finished");
            }
            if (!failure.ok()) pipelines_.erase(gen);
          }
        }
        if (lease_blocks.has_value()) blocks_->Release(*lease_blocks);
        std::vector<uint32_t> digests;
        if (failure.ok()) {
          // On the engine's thread: the decode side needs them with the final progress message;
          // only the last block is read here, the others' checks were computed chunk by chunk.
          absl::StatusOr<std::vector<uint32_t>> d =
              Digests(request_id, gen, wait->blocks, wait->block_generations, r->num_tokens,
                      chunk_checks.get());
          if (d.ok()) {
            digests = *std::move(d);
          } else {
            failure = absl::InternalError(
                absl::StrCat("cannot compute the KV digests: ", d.status().message()));
          }
        }
        if (failure.ok()) {
          MaybeFlipKvByte(wait->blocks.back());
          progress->Finish(r->num_tokens, r->first_token, std::move(digests),
                           logprobs ? std::optional(r->first_logprobs) : std::nullopt);
        } else {
          progress->Fail(failure);
        }
        if (!wait->answered) {  // failed before it had blocks
          wait->answered = true;
          wait->outcome =
              failure.ok() ? absl::InternalError("prefill finished unadmitted") : failure;
          wait->done.Notify();
        }
      });
  TANDEM_RETURN_IF_ERROR(AwaitSubmitted(submitted, wait->done, request_id, deadline, cancel));
  if (wait->outcome.ok() && (cancel.cancelled() || absl::Now() > deadline)) {
    // Admitted, but nobody will take the KV: release the lease, which cancels the prefill.
    ReleaseKv(request_id, epoch_, wait->generation);
    return cancel.cancelled() ? absl::CancelledError("prefill cancelled by the client")
                              : absl::DeadlineExceededError("prefill admitted after the deadline");
  }
  return std::move(wait->outcome);
}

absl::StatusOr<std::shared_ptr<const KvProgress>> PrefillNode::WatchKv(
    const std::string& request_id, uint64_t generation) const {
  absl::MutexLock lock(&mu_);
  const auto it = pipelines_.find(generation);
  if (it == pipelines_.end() || it->second.request_id != request_id) {
    return absl::AbortedError(absl::StrCat(
        "no pipelined prefill of request ", request_id, " with lease generation ", generation,
        " on this instance (it failed, or its KV lease was released or expired)"));
  }
  return std::shared_ptr<const KvProgress>(it->second.progress);
}

std::vector<std::string> PrefillNode::DropPipelinesWithoutLease(const absl::Status& why) {
  std::vector<std::string> running;
  for (auto it = pipelines_.begin(); it != pipelines_.end();) {
    if (leases_.Holds(it->first)) {
      ++it;
      continue;
    }
    if (!it->second.progress->Get().final()) {
      it->second.progress->Fail(why);
      running.push_back(it->second.request_id);
    }
    pipelines_.erase(it++);
  }
  return running;
}

void PrefillNode::CancelPrefills(const std::vector<std::string>& request_ids) {
  for (const std::string& id : request_ids) engine_->Cancel(id);
}

bool PrefillNode::ReleaseKv(const std::string& request_id, uint64_t epoch, uint64_t generation,
                            absl::Span<const int32_t> handle_blocks,
                            absl::Span<const uint32_t> handle_generations) {
  if (generation == 0 && (epoch == 0 || epoch == epoch_)) return ReleaseRequest(request_id);
  if (epoch != epoch_) return false;
  std::optional<std::vector<int32_t>> blocks;
  std::vector<std::string> cancel;
  std::string fenced;  // why the handle's blocks are not the lease's any more; empty: they are
  {
    absl::MutexLock lock(&mu_);
    blocks = leases_.Release(request_id, generation);
    if (blocks.has_value()) ++leases_released_;
    // Generation fencing, after the decode side's reads and before this release frees anything
    // (which bumps the generations itself): a block freed since the lease was taken — by a
    // bookkeeping bug, since the lease held a reference — has a newer generation now, and a
    // block can be reused and overwritten only after such a free. So any reuse that overlapped
    // the reads is seen here, and the release reports the lease as not held. Blocks freed that
    // way are not freed again (their next owner holds them now).
    if (blocks.has_value() && !handle_generations.empty()) {
      if (!std::equal(blocks->begin(), blocks->end(), handle_blocks.begin(), handle_blocks.end())) {
        fenced = "the handle names other blocks than the lease holds";
      } else {
        absl::StatusOr<std::vector<int32_t>> freed =
            blocks_->FreedSince(handle_blocks, handle_generations);
        if (!freed.ok()) {
          fenced = std::string(freed.status().message());
        } else if (!freed->empty()) {
          fenced = absl::StrCat(freed->size(), " of its ", blocks->size(),
                                " blocks were freed while it was held (first: block ",
                                freed->front(), ")");
          for (int32_t b : *freed) blocks->erase(std::find(blocks->begin(), blocks->end(), b));
        }
      }
    }
    cancel = DropPipelinesWithoutLease(
        absl::CancelledError("the KV lease was released while the prefill ran"));
  }
  CancelPrefills(cancel);
  if (!blocks.has_value()) return false;
  blocks_->Release(*blocks);
  if (!fenced.empty()) {
    const std::string line = absl::StrCat("tandem-prefill: KV lease ", generation, " of request ",
                                          request_id, " released as NOT held: ", fenced, "\n");
    std::fwrite(line.data(), 1, line.size(), stderr);
    return false;
  }
  return true;
}

bool PrefillNode::TestOnlyFreeLeasedBlocks(uint64_t generation) {
  std::vector<int32_t> blocks;
  {
    absl::MutexLock lock(&mu_);
    if (!leases_.Holds(generation)) return false;
    blocks = leases_.Blocks(generation);
  }
  blocks_->Release(blocks);
  return true;
}

void PrefillNode::MaybeFlipKvByte(int32_t block) {
  {
    absl::MutexLock lock(&mu_);
    if (kv_bytes_flipped_ >= options_.testing_flip_kv_byte) return;
    ++kv_bytes_flipped_;
  }
  // Head 0, layer 0, K, slot 0 of rank 0 (DCP rank 0, which owns the prompt's first token).
  const PoolGeometry g = RankPoolGeometry(source_->metadata().layout, 0);
  auto* pool = static_cast<unsigned char*>(source_->pool(0).base());
  pool[block * g.block_bytes()] ^= 0x01;
  const std::string line =
      absl::StrCat("tandem-prefill: testing_flip_kv_byte: flipped a KV byte of block ", block,
                   " (rank 0) after its digests were computed\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::shared_ptr<KvChunkChecks> PrefillNode::HookChunkChecks(PrefillJob& req, int64_t num_tokens) {
  if (!options_.kv_digests) return nullptr;
  auto checks = std::make_shared<KvChunkChecks>(source_->metadata().layout, num_tokens);
  req.on_kv_written = [this, checks](const std::vector<int32_t>& blocks, int64_t begin,
                                     int64_t end) {
    const int64_t before = checks->blocks_checked();
    const absl::Time start = absl::Now();
    // A block left without checks (an error here) is read by Digests at the end instead.
    checks->Written(PoolViews(*source_), blocks, begin, end).IgnoreError();
    kv_digest_compute_nanos_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start));
    kv_blocks_checked_as_written_.fetch_add(checks->blocks_checked() - before);
  };
  return checks;
}

absl::StatusOr<std::vector<uint32_t>> PrefillNode::Digests(
    const std::string& request_id, uint64_t lease_generation, const std::vector<int32_t>& blocks,
    const std::vector<uint32_t>& block_generations, int64_t num_tokens,
    const KvChunkChecks* written) const {
  if (!options_.kv_digests) return std::vector<uint32_t>();
  const absl::Time start = absl::Now();
  // Cached blocks are bound from the checks of their first write (not read again: a hit was
  // verified against them), written ones from the checks computed as the engine wrote them;
  // the blocks this prompt wrote and the cache took get theirs recorded.
  std::vector<KvBlockChecks> known =
      prefix_cache_ != nullptr ? prefix_cache_->Checks(blocks) : std::vector<KvBlockChecks>();
  if (written != nullptr) known = MergeKnownChecks(std::move(known), written->checks());
  std::vector<KvBlockChecks> checks;
  absl::StatusOr<std::vector<uint32_t>> digests = ComputeKvDigests(
      source_->metadata().layout, PoolViews(*source_), num_tokens,
      KvDigestBinding{request_id, lease_generation, blocks, block_generations},
      DefaultKvDigestThreads(), known, prefix_cache_ != nullptr ? &checks : nullptr);
  if (digests.ok() && prefix_cache_ != nullptr) prefix_cache_->RecordChecks(blocks, checks);
  kv_digest_compute_nanos_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start));
  return digests;
}

bool PrefillNode::ReleaseRequest(const std::string& request_id) {
  std::vector<std::vector<int32_t>> released;
  std::vector<std::string> cancel;
  {
    absl::MutexLock lock(&mu_);
    released = leases_.ReleaseRequest(request_id);
    if (released.empty() && prefilling_.contains(request_id)) {
      // Its prefill is still running: the lease it takes is released at once.
      early_releases_.Remember(request_id, absl::Now());
    }
    leases_released_ += static_cast<int64_t>(released.size());
    cancel = DropPipelinesWithoutLease(
        absl::CancelledError("the KV lease was released while the prefill ran"));
  }
  CancelPrefills(cancel);
  for (const std::vector<int32_t>& blocks : released) blocks_->Release(blocks);
  return !released.empty();
}

void PrefillNode::EndPrefilling(const std::string& request_id) {
  const auto it = prefilling_.find(request_id);
  if (it != prefilling_.end() && --it->second == 0) prefilling_.erase(it);
}

std::optional<absl::Time> PrefillNode::RenewLease(const std::string& request_id,
                                                  uint64_t generation, absl::Duration extend) {
  extend = extend <= absl::ZeroDuration() ? options_.default_lease
                                          : std::min(extend, options_.max_lease);
  absl::MutexLock lock(&mu_);
  return leases_.Renew(request_id, generation, absl::Now() + extend);
}

void PrefillNode::ReapLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    // Sleep until the earliest expiry (at most 100 ms so new, shorter leases are seen).
    const absl::Time wake = std::min(leases_.NextExpiry(), absl::Now() + absl::Milliseconds(100));
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake);
    if (stopping_) break;
    std::vector<std::vector<int32_t>> expired = leases_.TakeExpired(absl::Now());
    leases_expired_ += static_cast<int64_t>(expired.size());
    for (const auto& blocks : expired) blocks_->Release(blocks);
    if (expired.empty()) continue;
    // Under mu_: the engine never calls into this node while holding its own lock.
    CancelPrefills(DropPipelinesWithoutLease(
        absl::AbortedError("the KV lease expired while the prefill ran")));
  }
}

}  // namespace tandem
