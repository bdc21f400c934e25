#include "decode_node/decode_node.h"

#include <algorithm>
#include <atomic>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "attention/dcp_layout.h"
#include "common/kv_source_failure.h"
#include "common/request_checks.h"
#include "common/status_macros.h"
#include "engine/choice_blocks.h"
#include "kv_transfer/kv_digest.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "model/format/model_loader.h"
#include "model/guided_sampling.h"

namespace tandem {

DecodeNode::DecodeNode(DecodeNodeOptions options) : options_(std::move(options)) {}
DecodeNode::~DecodeNode() {
  colocated_.reset();  // its prefill callbacks add to engine_ and free into blocks_
}

absl::StatusOr<std::unique_ptr<DecodeNode>> DecodeNode::Create(DecodeNodeOptions options) {
  options.instance.role = InstanceRole::kDecode;
  std::unique_ptr<DecodeNode> node(new DecodeNode(std::move(options)));
  const DecodeNodeOptions& o = node->options_;
  if (!o.pullers || o.prefill == nullptr) {
    return absl::InvalidArgumentError(
        "DecodeNode needs a KV puller factory and a prefill client (DecodeNodeOptions)");
  }
  TANDEM_ASSIGN_OR_RETURN(LoadedModel model, LoadModel(o.model_path));
  node->config_ = model.weights.config;
  node->identity_ = model.identity;
  node->model_name_ = o.model_name.empty() ? model.weights.config.name : o.model_name;
  node->engine_id_ = absl::StrCat("decode-", o.advertised_address);
  TANDEM_RETURN_IF_ERROR(
      ValidateParallelConfig(o.instance.parallel, DimsOf(node->config_), InstanceRole::kDecode));
  const int32_t world = o.instance.parallel.world();
  for (int32_t r = 0; r < world; ++r) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvPuller> p, o.pullers(r));
    node->pullers_.push_back(std::move(p));
  }
  InstanceOptions io = o.instance;
  DecodeNode* raw = node.get();
  io.pool_allocator = [raw](int32_t rank,
                            int64_t bytes) -> absl::StatusOr<std::unique_ptr<KvPoolMemory>> {
    return raw->pullers_[rank]->AllocatePool(bytes);
  };
  TANDEM_ASSIGN_OR_RETURN(node->instance_, Instance::Create(model.weights, io));
  std::vector<KvPuller*> pullers;
  std::vector<absl::Span<std::byte>> pools;
  for (int32_t d = 0; d < world; ++d) {
    pullers.push_back(node->pullers_[d].get());
    const KvPoolView pool = node->instance_->transfer_pool(d);
    pools.emplace_back(static_cast<std::byte*>(pool.base),
                       static_cast<size_t>(PoolBytes(pool.geometry, pool.num_blocks)));
  }
  node->pulls_ = std::make_unique<RankPulls>(std::move(pullers), std::move(pools),
                                             RankPullsOptions{o.max_in_flight, o.stall_timeout});
  node->blocks_ = std::make_unique<BlockManager>(node->instance_->num_blocks());
  // One grammar cache for the decode engine and the colocated prefill (docs/structured_output.md).
  std::shared_ptr<GrammarCache> grammars = MakeGrammarCache(model.tokenizer.get());
  DecodeOptions decode = o.decode;
  decode.grammars = grammars;
  node->engine_ =
      std::make_unique<DecodeEngine>(node->instance_.get(), node->blocks_.get(), decode);
  if (o.colocated_prefill) {
    PrefillOptions colocated = o.colocated;
    colocated.grammars = grammars;
    node->colocated_ = std::make_unique<ColocatedPrefill>(
        node->instance_.get(), node->blocks_.get(), node->engine_.get(), colocated);
  }
  node->started_ = absl::Now();
  return node;
}

KvLayout DecodeNode::layout() const {
  return KvLayout{options_.instance.parallel, DimsOf(config_), options_.instance.kv_dtype};
}

int32_t DecodeNode::queued() const {
  absl::MutexLock lock(&mu_);
  const int32_t colocated =
      colocated_ != nullptr ? colocated_->queued() + colocated_->running() : 0;
  return engine_->queued() + waiting_ + colocated;
}

bool DecodeNode::Cancel(const std::string& request_id) {
  if (colocated_ != nullptr && colocated_->Cancel(request_id)) return true;
  return engine_->Cancel(request_id);
}

absl::Status DecodeNode::StartColocated(ColocatedCall call, DecodeSink sink) {
  if (colocated_ == nullptr) {
    return absl::FailedPreconditionError(
        "this decode instance does not prefill prompts itself (start tandem-decode with "
        "--colocated_prefill=true, or send it a KV handle from a prefill node)");
  }
  TANDEM_RETURN_IF_ERROR(ValidateSamplingParams(call.sampling));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingIds(call.sampling, config_.vocab_size));
  if (call.next_step < 1) return absl::InvalidArgumentError("next_step must be >= 1");
  if (call.resume_token.has_value()) {
    TANDEM_RETURN_IF_ERROR(CheckTokenId(*call.resume_token, config_.vocab_size, "first token"));
  }
  TANDEM_RETURN_IF_ERROR(CheckContextFit(static_cast<int64_t>(call.prompt.size()),
                                         call.max_new_tokens, "max_new_tokens",
                                         config_.max_context));
  return colocated_->Start(std::move(call), std::move(sink));
}

absl::StatusOr<std::shared_ptr<const TransferMetadata>> DecodeNode::Metadata(const KvHandle& kv) {
  const auto key = std::make_pair(kv.engine_id, kv.epoch);
  {
    absl::MutexLock lock(&mu_);
    auto it = metadata_.find(key);
    if (it != metadata_.end()) return it->second;
  }
  TANDEM_ASSIGN_OR_RETURN(TransferMetadata meta,
                          options_.prefill->GetTransferMetadata(
                              kv.prefill_address, absl::Now() + options_.rpc_timeout));
  if (meta.engine_id != kv.engine_id || meta.epoch != kv.epoch) {
    return absl::AbortedError(
        absl::StrCat("prefill ", kv.prefill_address, " now serves engine ", meta.engine_id,
                     " epoch ", meta.epoch, " but the KV handle names engine ", kv.engine_id,
                     " epoch ", kv.epoch, " (the prefill instance restarted; its KV is gone)"));
  }
  // The handshake: refuse an incompatible pair once, here, not per token.
  TANDEM_RETURN_IF_ERROR(CheckHandshake(CompatibilityHash(identity_, layout()), meta));
  TANDEM_RETURN_IF_ERROR(CheckKvCompatible(meta.layout, layout()));
  auto shared = std::make_shared<const TransferMetadata>(std::move(meta));
  absl::MutexLock lock(&mu_);
  metadata_[key] = shared;
  return shared;
}

absl::StatusOr<bool> DecodeNode::ReleaseKv(const KvHandle& kv) {
  return options_.prefill->ReleaseKv(kv, absl::Now() + options_.rpc_timeout);
}

absl::StatusOr<std::vector<int32_t>> DecodeNode::WaitForBlocks(int32_t count,
                                                               const CancellationToken& cancel,
                                                               const CancellationToken& pull,
                                                               const LeaseKeeper& lease) {
  if (count > blocks_->total_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("request needs ", count,
                                                     " KV blocks but this decode instance has ",
                                                     blocks_->total_blocks(), " in total"));
  }
  const absl::Time deadline = absl::Now() + options_.queue_timeout;
  while (true) {
    absl::StatusOr<std::vector<int32_t>> got = blocks_->Allocate(count);
    if (got.ok()) return got;
    if (cancel.cancelled()) {
      return absl::CancelledError("decode cancelled while waiting for KV capacity");
    }
    if (lease.lost()) {
      return absl::AbortedError("the prefill's KV lease expired while waiting for capacity");
    }
    if (absl::Now() >= deadline) {
      return absl::ResourceExhaustedError(
          absl::StrCat("KV capacity short for ", absl::FormatDuration(options_.queue_timeout),
                       " (queue timeout): ", got.status().message()));
    }
    // Woken by the Free that makes room, and at once by a cancel or a lost lease (both cancel
    // `pull`), not by a poll interval.
    blocks_->AwaitFree(count, deadline, &pull);
  }
}

absl::Status DecodeNode::Pull(const TransferMetadata& source, const TransferPlan& plan,
                              CancellationToken* pull, OverlappedKvCheck* check,
                              int64_t landed_tokens) {
  // The digest check rides on the copy where the bytes pass through this process (copy_crcs.h);
  // CRC requests cost a walk over the plan, so only when a check will use them.
  std::optional<std::vector<CopyCrcs>> crcs;
  if (check != nullptr) {
    absl::StatusOr<std::vector<CopyCrcs>> req = check->CrcRequests(plan);
    if (req.ok()) crcs = *std::move(req);  // unusable requests: the check reads the pools
  }
  TANDEM_RETURN_IF_ERROR(pulls_->Pull(source, plan, pull, crcs.has_value() ? &*crcs : nullptr));
  if (check != nullptr) check->Landed(landed_tokens, &plan, crcs.has_value() ? &*crcs : nullptr);
  return absl::OkStatus();
}

absl::Status DecodeNode::PullPipelined(const TransferMetadata& source, const KvHandle& kv,
                                       const std::vector<int32_t>& blocks,
                                       const CancellationToken& cancel, CancellationToken* pull,
                                       int32_t* first_token,
                                       std::optional<TokenLogprobs>* first_logprobs,
                                       std::vector<uint32_t>* digests, OverlappedKvCheck* check,
                                       TransferStats* stats) {
  // The prefill runs for as long as its prompt takes; every wait below is bounded on its own
  // (stall_timeout between progress messages), this only caps a stream that keeps repeating.
  constexpr absl::Duration kWatchCap = absl::Hours(1);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvWatch> watch,
                          options_.prefill->WatchKv(kv, absl::Now() + kWatchCap));
  const KvLayout dst = layout();
  int64_t landed = 0;  // prompt tokens pulled
  absl::Time last_message = absl::Now();
  while (true) {
    if (cancel.cancelled()) {
      return absl::CancelledError("decode cancelled while pulling a pipelined KV");
    }
    if (pull->cancelled()) {
      return absl::AbortedError("the prefill's KV lease was lost during the pipelined transfer");
    }
    // Waits until the stall deadline at most; a cancel ends it at once.
    const absl::Duration budget =
        std::max(last_message + options_.stall_timeout - absl::Now(), absl::ZeroDuration());
    TANDEM_ASSIGN_OR_RETURN(std::optional<KvProgressEvent> next, watch->Next(budget, *pull));
    if (!next.has_value()) {
      if (pull->cancelled()) continue;  // reported above
      if (absl::Now() - last_message >= options_.stall_timeout) {
        return BlameKvSource(absl::DeadlineExceededError(absl::StrCat(
                                 "no KV progress from prefill ", kv.prefill_address, " for ",
                                 absl::FormatDuration(options_.stall_timeout), " (", landed, " of ",
                                 kv.num_tokens, " prompt tokens pulled)")),
                             {kv.prefill_address, kv.engine_id, {}});
      }
      continue;
    }
    last_message = absl::Now();
    if (next->tokens_ready > kv.num_tokens || (next->done && next->tokens_ready != kv.num_tokens)) {
      return BlameKvSource(absl::InternalError(absl::StrCat(
                               "prefill ", kv.prefill_address, " reported ", next->tokens_ready,
                               " tokens ready of a ", kv.num_tokens, "-token prompt")),
                           {kv.prefill_address, kv.engine_id, {}});
    }
    // The digests come with done: the ranges already landed are checked during the last pull.
    if (next->done) {
      TANDEM_RETURN_IF_ERROR(DigestsCheckable(next->kv_digests));
      TANDEM_RETURN_IF_ERROR(check->SetDigests(next->kv_digests));
    }
    if (next->tokens_ready > landed) {
      TANDEM_ASSIGN_OR_RETURN(TransferPlan plan,
                              PlanKvTransferRange(source.layout, kv.block_table, dst, blocks,
                                                  kv.num_tokens, landed, next->tokens_ready));
      const absl::Time pull_start = absl::Now();
      // CRCs in the copy even before the digests come (with done): computing them costs the copy
      // nothing measurable, and the chunks already landed need no second read then.
      TANDEM_RETURN_IF_ERROR(Pull(source, plan, pull, check, next->tokens_ready));
      stats->micros += absl::ToInt64Microseconds(absl::Now() - pull_start);
      stats->bytes += plan.total_bytes();
      stats->copies += plan.total_copies();
      ++stats->chunks;
      if (!next->done) ++stats->chunks_before_prefill_done;
      landed = next->tokens_ready;
    }
    if (next->done) {
      *first_token = next->first_token;
      *first_logprobs = next->first_logprobs;
      *digests = next->kv_digests;
      return absl::OkStatus();
    }
  }
}

absl::Status DecodeNode::DigestsCheckable(const std::vector<uint32_t>& digests) const {
  if (digests.empty() || options_.instance.kv_staging != KvStaging::kDevice) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      "the prefill sent KV digests, but this decode node's KV pools are device memory "
      "(--kv_gpu_direct) that cannot be read on the host to check them; run the prefill nodes "
      "with --kv_digests=false next to GPU-direct decode nodes");
}

OverlappedKvCheckInput DecodeNode::CheckInput(const TransferMetadata& source, const KvHandle& kv,
                                              const std::vector<int32_t>& blocks) const {
  OverlappedKvCheckInput in;
  in.src = source.layout;
  in.dst = layout();
  in.num_tokens = kv.num_tokens;
  in.request_id = kv.request_id;
  in.lease_generation = kv.generation;
  in.src_blocks = kv.block_table;
  in.src_block_generations = kv.block_generations;
  in.dst_blocks = blocks;
  for (int32_t d = 0; d < instance_->world(); ++d) {
    const KvPoolView pool = instance_->transfer_pool(d);
    in.dst_pools.emplace_back(static_cast<const std::byte*>(pool.base),
                              static_cast<size_t>(PoolBytes(pool.geometry, pool.num_blocks)));
  }
  return in;
}

absl::Status DecodeNode::PullAll(const TransferMetadata& source, const KvHandle& kv,
                                 const std::vector<int32_t>& blocks, CancellationToken* pull,
                                 OverlappedKvCheck* check, TransferStats* stats) {
  const absl::Time start = absl::Now();
  absl::Cleanup timed = [&] { stats->micros = absl::ToInt64Microseconds(absl::Now() - start); };
  const KvLayout dst = layout();
  TANDEM_ASSIGN_OR_RETURN(
      TransferPlan plan, PlanKvTransfer(source.layout, kv.block_table, dst, blocks, kv.num_tokens));
  const int64_t total = plan.total_bytes();
  const DcpGeometry src_dcp = source.layout.parallel.dcp_geometry();
  const int64_t num_blocks = VirtualBlocksFor(src_dcp, kv.num_tokens);
  const int64_t per_range = check->has_digests()
                                ? BlocksPerPullRange(total, num_blocks, options_.pull_chunk_bytes)
                                : num_blocks;
  OverlappedKvCheck* const crc_check = check->has_digests() ? check : nullptr;
  if (per_range >= num_blocks) {
    stats->bytes = total;
    stats->copies = plan.total_copies();
    TANDEM_RETURN_IF_ERROR(Pull(source, plan, pull, crc_check, kv.num_tokens));
    if (crc_check == nullptr) check->Landed(kv.num_tokens);
    return absl::OkStatus();
  }
  // Block-aligned ranges of about pull_chunk_bytes: each is checked as it lands — from the CRCs
  // of its copy, or on the check lane while the next one is pulled.
  const int64_t block_tokens = VirtualBlockTokens(src_dcp);
  for (int64_t b = 0, step = per_range; b < num_blocks; b += step) {
    // The first range's copies were all CRCed on the way (a mapped shared-memory pool): the
    // check needs no overlap, so the rest goes in one pull.
    if (b > 0 && crc_check->last_pull_fused()) step = num_blocks - b;
    const int64_t begin = b * block_tokens;
    const int64_t end = std::min(kv.num_tokens, (b + step) * block_tokens);
    TANDEM_ASSIGN_OR_RETURN(
        TransferPlan part,
        PlanKvTransferRange(source.layout, kv.block_table, dst, blocks, kv.num_tokens, begin, end));
    TANDEM_RETURN_IF_ERROR(Pull(source, part, pull, crc_check, end));
    stats->bytes += part.total_bytes();
    stats->copies += part.total_copies();
  }
  return absl::OkStatus();
}

absl::Status DecodeNode::VerifyDigests(const KvHandle& kv, OverlappedKvCheck* check,
                                       TransferStats* stats) {
  const absl::Time start = absl::Now();
  std::vector<KvDigestMismatch> bad;
  const absl::Status s = check->Finish(&bad, DefaultKvDigestThreads());
  stats->digest_wait_micros = absl::ToInt64Microseconds(absl::Now() - start);
  stats->digest_micros = absl::ToInt64Microseconds(check->check_time());
  stats->digest_ranges_overlapped = check->early_checks();
  stats->digest_fused_bytes = check->fused_bytes();
  kv_digest_check_nanos_.fetch_add(
      absl::ToInt64Nanoseconds(check->check_time() + check->crc_bookkeeping_time()));
  if (s.ok()) {
    stats->digests_verified = true;
    kv_digests_verified_.fetch_add(1);
    return s;
  }
  kv_digest_mismatches_.fetch_add(1);
  // One line per bad block shard: what an operator needs to find the faulty pool or link.
  for (const KvDigestMismatch& m : bad) {
    std::string ranks;
    for (int32_t d : m.dst_ranks) absl::StrAppend(&ranks, ranks.empty() ? "" : ",", d);
    const std::string line = absl::StrCat(
        "tandem-decode: KV digest mismatch request_id=", kv.request_id,
        " prefill=", kv.prefill_address, " engine=", kv.engine_id, " lease=", kv.generation,
        " src_rank=", m.src_rank, " block=", m.block, " block_generation=", m.block_generation,
        " head=", m.head, " dst_ranks=", ranks, "\n");
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  std::vector<int32_t> src_ranks;
  for (const KvDigestMismatch& m : bad) src_ranks.push_back(m.src_rank);
  return BlameKvSource(
      absl::AbortedError(absl::StrCat("the KV pulled from prefill ", kv.prefill_address,
                                      " failed its digests (", s.message(),
                                      "); the pulled KV is discarded (prefill again)")),
      {kv.prefill_address, kv.engine_id, src_ranks});
}

absl::StatusOr<TransferStats> DecodeNode::Start(const DecodeCall& call, DecodeSink sink,
                                                const CancellationToken& cancel) {
  if (!call.choices.empty()) {
    return absl::InvalidArgumentError("a call with choices starts with StartChoices");
  }
  std::vector<DecodeSink> sinks;
  sinks.push_back(std::move(sink));
  return StartCall(call, std::move(sinks), cancel);
}

absl::StatusOr<TransferStats> DecodeNode::StartChoices(const DecodeCall& call,
                                                       std::vector<DecodeSink> sinks,
                                                       const CancellationToken& cancel) {
  if (call.choices.empty() || sinks.size() != call.choices.size()) {
    return absl::InvalidArgumentError(absl::StrCat("StartChoices needs one sink per choice (",
                                                   call.choices.size(), " choices, ", sinks.size(),
                                                   " sinks)"));
  }
  return StartCall(call, std::move(sinks), cancel);
}

absl::StatusOr<TransferStats> DecodeNode::StartCall(const DecodeCall& call,
                                                    std::vector<DecodeSink> sinks,
                                                    const CancellationToken& cancel) {
  const KvHandle& kv = call.kv;
  TANDEM_RETURN_IF_ERROR(CheckTokenBudget(call.max_new_tokens, "max_new_tokens"));
  if (!call.pipelined) {
    TANDEM_RETURN_IF_ERROR(CheckTokenId(call.first_token, config_.vocab_size, "first token"));
  }
  TANDEM_RETURN_IF_ERROR(CheckDecodeChoices(call, config_.vocab_size));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingParams(call.sampling));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingIds(call.sampling, config_.vocab_size));
  if (kv.num_tokens < 1) return absl::InvalidArgumentError("KV handle covers no tokens");
  if (NeedsContext(call.sampling) &&
      static_cast<int64_t>(call.context_ids.size()) != kv.num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context_ids: ",
        UsesPenalties(call.sampling) ? "sampling penalties need" : "a grammar needs",
        " the ids of the ", kv.num_tokens, " tokens the KV covers, got ", call.context_ids.size()));
  }
  TANDEM_RETURN_IF_ERROR(
      CheckContextFit(kv.num_tokens, call.max_new_tokens, "max_new_tokens", config_.max_context));
  const int64_t positions = kv.num_tokens + call.max_new_tokens;
  {
    absl::MutexLock lock(&mu_);
    ++waiting_;
  }
  absl::Cleanup not_waiting = [this] {
    absl::MutexLock lock(&mu_);
    --waiting_;
  };
  // From here on, every failure must give the prefill its KV back.
  bool released = false;
  absl::Cleanup release = [&] {
    if (!released) ReleaseKv(kv).IgnoreError();
  };

  TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<const TransferMetadata> meta, Metadata(kv));
  if (kv.layout.parallel != meta->layout.parallel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV handle layout (", kv.layout.parallel.ToString(),
        ") differs from the prefill's published layout (", meta->layout.parallel.ToString(), ")"));
  }
  const KvLayout dst = layout();
  const int32_t needed =
      static_cast<int32_t>(VirtualBlocksFor(dst.parallel.dcp_geometry(), positions));
  // The lease is renewed from here until the pull ends, however long both take; losing it
  // cancels the pull (nothing pulled could be used), as does the request's cancel.
  CancellationToken pull(&cancel);
  LeaseKeeper lease(options_.prefill.get(), kv, options_.rpc_timeout, &pull);
  // n > 1: the further choices' own blocks come after choice 0's (engine/choice_blocks.h).
  const int64_t choices = std::max<int64_t>(1, static_cast<int64_t>(call.choices.size()));
  TANDEM_ASSIGN_OR_RETURN(
      std::vector<int32_t> allocated,
      WaitForBlocks(static_cast<int32_t>(ChoiceBlocksNeeded(
                        needed, kv.num_tokens, VirtualBlockTokens(dst.parallel.dcp_geometry()),
                        static_cast<int32_t>(choices))),
                    cancel, pull, lease));
  blocks_allocated_.fetch_add(static_cast<int64_t>(allocated.size()));
  bool blocks_owned = true;
  absl::Cleanup free_blocks = [&] {
    if (blocks_owned) blocks_->Release(allocated);
  };
  // Choice 0's table: the pull lands here.
  const std::vector<int32_t> blocks(allocated.begin(), allocated.begin() + needed);
  TransferStats stats;
  int32_t first_token = call.first_token;
  std::optional<TokenLogprobs> first_logprobs;  // pipelined: the prefill's, for first_token
  std::vector<uint32_t> digests = kv.kv_digests;
  // Checks KV digests as block ranges land; waits for its checks on every exit path, before
  // the blocks it reads are freed.
  OverlappedKvCheck check(CheckInput(*meta, kv, blocks), pulls_->check_lanes(),
                          RankPulls::kCheckLane);
  absl::Status pulled;
  if (call.pipelined) {
    pulled = PullPipelined(*meta, kv, blocks, cancel, &pull, &first_token, &first_logprobs,
                           &digests, &check, &stats);
  } else {
    pulled = DigestsCheckable(digests);
    if (pulled.ok()) pulled = check.SetDigests(digests);
    if (pulled.ok()) pulled = PullAll(*meta, kv, blocks, &pull, &check, &stats);
  }
  lease.Stop();
  if (lease.lost()) {
    // The pull's own blame, if it failed, stays with it.
    return WithPayloadsOf(
        absl::AbortedError(absl::StrCat("the prefill's KV lease expired during the transfer (",
                                        pulled.ok() ? "pull complete" : pulled.message(),
                                        "); prefill again")),
        pulled);
  }
  TANDEM_RETURN_IF_ERROR(pulled);
  if (call.pipelined) {
    TANDEM_RETURN_IF_ERROR(CheckTokenId(first_token, config_.vocab_size, "prefill's first token"));
    if (call.sampling.logprobs >= 0 && !first_logprobs.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "prefill ", kv.prefill_address,
          " sent no log-probabilities with its first token (a build that predates them in "
          "KvProgress): send the call unpipelined"));
    }
  }
  // Before the lease is released and before any decode step reads the KV. A prefill that sends
  // no digests (--kv_digests=false) is trusted as before.
  if (!digests.empty()) {
    TANDEM_RETURN_IF_ERROR(VerifyDigests(kv, &check, &stats));
  }

  released = true;
  absl::StatusOr<bool> held = ReleaseKv(kv);
  if (!held.ok()) {
    return BlameKvSource(
        absl::UnavailableError(absl::StrCat(
            "cannot confirm the KV lease with prefill ", kv.prefill_address,
            " after the transfer (", held.status().message(), "); the pulled KV is discarded")),
        {kv.prefill_address, kv.engine_id, {}});
  }
  if (!*held) {
    return absl::AbortedError(
        "the prefill's KV lease expired before the transfer finished; the pulled KV is "
        "discarded (prefill again)");
  }
  if (cancel.cancelled()) return absl::CancelledError("decode cancelled by the client");
  // Device pools: the pull landed in the host mirror; the pool needs it before the first step.
  TANDEM_RETURN_IF_ERROR(instance_->StageIn(blocks));

  blocks_owned = false;  // Admit hands them to the engine, or frees them
  TANDEM_RETURN_IF_ERROR(
      Admit(call, std::move(allocated), needed, first_token, first_logprobs, std::move(sinks)));
  return stats;
}

}  // namespace tandem
