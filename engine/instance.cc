#include "engine/instance.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "common/parallel_for.h"
#include "common/status_macros.h"
#include "engine/backend_registry.h"

namespace tandem {
namespace {

class BackendPoolMemory final : public KvPoolMemory {
 public:
  explicit BackendPoolMemory(std::unique_ptr<DeviceBuffer> buffer) : buffer_(std::move(buffer)) {}
  void* base() const override { return buffer_->data(); }
  int64_t bytes() const override { return buffer_->bytes(); }

 private:
  std::unique_ptr<DeviceBuffer> buffer_;
};

void AbortAll(RankComms& comms, const absl::Status& reason) {
  for (Communicator* c : {comms.tp.get(), comms.pcp.get(), comms.dcp.get()}) {
    if (c != nullptr) c->Abort(reason);
  }
}

}  // namespace

ModelDims DimsOf(const LlamaConfig& c) {
  return ModelDims{c.num_layers, c.num_q_heads, c.num_kv_heads, c.head_dim};
}

Instance::Instance(const LlamaConfig& config, const InstanceOptions& options)
    : config_(config), options_(options) {}

Instance::~Instance() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

KvPoolView Instance::pool(int32_t rank) const {
  return KvPoolView{pools_[rank]->base(), num_blocks_, geometry_};
}

int64_t Instance::weight_bytes(int32_t rank) const {
  return models_[rank]->weights().resident_bytes;
}
const std::vector<std::string>& Instance::weight_f32_fallbacks(int32_t rank) const {
  return models_[rank]->weights().f32_fallbacks;
}

KvPoolView Instance::transfer_pool(int32_t rank) const {
  return staged_ ? KvPoolView{mirrors_[rank]->base(), num_blocks_, geometry_} : pool(rank);
}

absl::StatusOr<std::unique_ptr<Instance>> Instance::Create(const LlamaWeights& weights,
                                                           const InstanceOptions& options) {
  const LlamaConfig& config = weights.config;
  const ParallelConfig& par = options.parallel;
  TANDEM_RETURN_IF_ERROR(ValidateParallelConfig(par, DimsOf(config), options.role));
  std::unique_ptr<Instance> inst(new Instance(config, options));
  const RankPlacement first = PlaceRank(par, DimsOf(config), 0);
  inst->geometry_ = PoolGeometry{first.kv_head_count, config.num_layers, par.block_size,
                                 config.head_dim, options.kv_dtype};
  const int64_t block_bytes = inst->geometry_.block_bytes();
  const int64_t blocks = options.kv_bytes_per_rank / block_bytes;
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV budget of ", options.kv_bytes_per_rank, " bytes per rank is smaller than one block (",
        block_bytes, " bytes = ", first.kv_head_count, " heads x ", config.num_layers,
        " layers x 2 x ", par.block_size, " tokens x ", config.head_dim, " x ",
        KvDTypeBytes(options.kv_dtype), " bytes)"));
  }
  inst->num_blocks_ = static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX));

  // Communicators for every TP, PCP and DCP group (device index = global rank).
  const int32_t world = par.world();
  std::vector<RankComms> comms(world);
  auto make_groups = [&](const std::vector<std::vector<int32_t>>& groups,
                         std::unique_ptr<Communicator> RankComms::*slot) -> absl::Status {
    for (const std::vector<int32_t>& members : groups) {
      TANDEM_ASSIGN_OR_RETURN(
          std::vector<std::unique_ptr<Communicator>> group,
          CreateCommunicators(options.backend, members, options.collective_timeout));
      for (size_t i = 0; i < members.size(); ++i) comms[members[i]].*slot = std::move(group[i]);
    }
    return absl::OkStatus();
  };
  std::vector<std::vector<int32_t>> tp_groups, pcp_groups, dcp_groups;
  for (int32_t c = 0; c < par.pcp; ++c) tp_groups.push_back(TpGroupRanks(par, c));
  for (int32_t t = 0; t < par.tp; ++t) pcp_groups.push_back(PcpGroupRanks(par, t));
  for (int32_t g = 0; g < world / par.dcp; ++g) dcp_groups.push_back(DcpGroupRanks(par, g));
  TANDEM_RETURN_IF_ERROR(make_groups(tp_groups, &RankComms::tp));
  TANDEM_RETURN_IF_ERROR(make_groups(pcp_groups, &RankComms::pcp));
  TANDEM_RETURN_IF_ERROR(make_groups(dcp_groups, &RankComms::dcp));

  inst->models_.resize(world);
  inst->pools_.resize(world);
  inst->staged_ =
      options.pool_allocator && options.kv_staging != KvStaging::kDevice &&
      (options.kv_staging == KvStaging::kAlways || !BackendMemoryIsHost(options.backend));
  if (inst->staged_) inst->mirrors_.resize(world);
  {
    absl::MutexLock lock(&inst->mu_);
    inst->results_.assign(world, absl::OkStatus());
  }
  for (int32_t r = 0; r < world; ++r) {
    inst->threads_.emplace_back([raw = inst.get(), r] { raw->RankLoop(r); });
  }

  WeightCache cache;
  const int32_t threads = options.threads_per_rank > 0 ? options.threads_per_rank
                                                       : std::max(1, HardwareThreads() / world);
  Instance* self = inst.get();
  TANDEM_RETURN_IF_ERROR(self->RunOnAllRanks([&](int32_t rank) -> absl::Status {
    SetThreadsForThisThread(threads);
    absl::Status s = [&]() -> absl::Status {
      const RankPlacement placement = PlaceRank(par, DimsOf(config), rank);
      TANDEM_ASSIGN_OR_RETURN(
          std::unique_ptr<ComputeBackend> backend,
          options.make_backend ? options.make_backend(rank) : CreateBackend(options.backend, rank));
      TANDEM_ASSIGN_OR_RETURN(RankWeights rw,
                              PrepareRankWeights(weights, par, placement, *backend, cache));
      const int64_t pool_bytes = PoolBytes(self->geometry_, self->num_blocks_);
      if (options.pool_allocator) {
        TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvPoolMemory> transfer,
                                options.pool_allocator(rank, pool_bytes));
        if (transfer->bytes() < pool_bytes) {
          return absl::InternalError(absl::StrCat("pool allocator returned ", transfer->bytes(),
                                                  " bytes, need ", pool_bytes));
        }
        (self->staged_ ? self->mirrors_[rank] : self->pools_[rank]) = std::move(transfer);
      }
      if (self->pools_[rank] == nullptr) {
        TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBuffer> buf, backend->Allocate(pool_bytes));
        self->pools_[rank] = std::make_unique<BackendPoolMemory>(std::move(buf));
      }
      const KvPoolView view{self->pools_[rank]->base(), self->num_blocks_, self->geometry_};
      self->models_[rank] = std::make_unique<RankModel>(
          config, par, placement, std::move(backend), std::move(rw), std::move(comms[rank]), view);
      return absl::OkStatus();
    }();
    if (!s.ok()) AbortAll(comms[rank], s);
    return s;
  }));
  return inst;
}

void Instance::RankLoop(int32_t rank) {
  uint64_t seen = 0;
  while (true) {
    std::shared_ptr<const Job> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || job_generation_ != seen;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      seen = job_generation_;
      job = job_;
    }
    absl::Status s = (*job)(rank);
    if (!s.ok() && models_[rank] != nullptr) models_[rank]->AbortComms(s);
    absl::MutexLock lock(&mu_);
    results_[rank] = std::move(s);
    ++jobs_done_;
  }
}

absl::Status Instance::RunOnAllRanks(const Job& job) {
  const int32_t n = world();
  absl::MutexLock lock(&mu_);
  job_ = std::make_shared<const Job>(job);
  ++job_generation_;
  jobs_done_ = 0;
  results_.assign(n, absl::OkStatus());
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_done_ == n; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), options_.step_timeout)) {
    broken_ = absl::DeadlineExceededError(absl::StrCat(
        "instance step did not finish within ", absl::FormatDuration(options_.step_timeout)));
    for (auto& m : models_) {
      if (m != nullptr) m->AbortComms(broken_);
    }
    return broken_;
  }
  for (const absl::Status& s : results_) {
    if (!s.ok()) {
      broken_ = s;
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Instance::RunSerialized(const Job& job) {
  absl::MutexLock run_lock(&run_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("instance failed earlier and cannot run steps: ", broken_.ToString()));
    }
  }
  return RunOnAllRanks(job);
}

absl::Status Instance::Stage(absl::Span<const int32_t> blocks, bool to_mirror) {
  if (!staged_ || blocks.empty()) return absl::OkStatus();
  // Runs of consecutive block ids become one copy each.
  std::vector<int32_t> sorted(blocks.begin(), blocks.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<ByteRange> ranges;
  const int64_t bb = geometry_.block_bytes();
  for (size_t i = 0; i < sorted.size();) {
    if (sorted[i] < 0 || sorted[i] >= num_blocks_) {
      return absl::InvalidArgumentError(
          absl::StrCat("block ", sorted[i], " outside the pool of ", num_blocks_, " blocks"));
    }
    size_t j = i + 1;
    while (j < sorted.size() && sorted[j] <= sorted[j - 1] + 1) ++j;
    ranges.push_back(ByteRange{sorted[i] * bb, (int64_t{sorted[j - 1]} - sorted[i] + 1) * bb});
    i = j;
  }
  return RunSerialized([this, &ranges, to_mirror](int32_t rank) -> absl::Status {
    ComputeBackend& be = models_[rank]->backend();
    auto* pool = static_cast<std::byte*>(pools_[rank]->base());
    auto* mirror = static_cast<std::byte*>(mirrors_[rank]->base());
    for (const ByteRange& r : ranges) {
      TANDEM_RETURN_IF_ERROR(to_mirror ? be.Download(mirror + r.offset, pool + r.offset, r.length)
                                       : be.Upload(pool + r.offset, mirror + r.offset, r.length));
    }
    return be.Synchronize();
  });
}

absl::Status Instance::StageOut(absl::Span<const int32_t> blocks) { return Stage(blocks, true); }
absl::Status Instance::StageIn(absl::Span<const int32_t> blocks) { return Stage(blocks, false); }

absl::Status Instance::CopyBlocks(absl::Span<const std::pair<int32_t, int32_t>> copies) {
  if (copies.empty()) return absl::OkStatus();
  for (const auto& [src, dst] : copies) {
    for (const int32_t b : {src, dst}) {
      if (b < 0 || b >= num_blocks_) {
        return absl::InvalidArgumentError(
            absl::StrCat("block ", b, " outside the pool of ", num_blocks_, " blocks"));
      }
    }
  }
  const int64_t bb = geometry_.block_bytes();
  return RunSerialized([this, copies, bb](int32_t rank) -> absl::Status {
    ComputeBackend& be = models_[rank]->backend();
    auto* pool = static_cast<std::byte*>(pools_[rank]->base());
    for (const auto& [src, dst] : copies) {
      TANDEM_RETURN_IF_ERROR(be.Copy(pool + dst * bb, pool + src * bb, bb));
    }
    return be.Synchronize();
  });
}

absl::StatusOr<std::vector<float>> Instance::Run(const StepInput& input) {
  TANDEM_ASSIGN_OR_RETURN(StepPlan plan, BuildStepPlan(input, options_.parallel.dcp_geometry(),
                                                       options_.parallel.pcp, config_.vocab_size));
  auto shared_plan = std::make_shared<const StepPlan>(std::move(plan));
  auto logits = std::make_shared<std::vector<float>>();
  TANDEM_RETURN_IF_ERROR(RunSerialized([this, shared_plan, logits](int32_t rank) {
    return models_[rank]->Forward(*shared_plan, rank == 0 ? logits.get() : nullptr);
  }));
  return std::move(*logits);
}

}  // namespace tandem
