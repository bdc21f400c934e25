#include "engine/prefill_engine.h"

#include "absl/strings/str_cat.h"
#include "common/request_checks.h"
#include "common/status_macros.h"
#include "model/token_history.h"

namespace tandem {
namespace {

// While requests wait for KV blocks, the scheduler re-checks capacity this often (blocks are
// freed by other threads: decode finishing, KV released after transfer, leases expiring).
constexpr absl::Duration kCapacityPoll = absl::Milliseconds(5);

}  // namespace

PrefillEngine::PrefillEngine(Instance* instance, BlockManager* blocks,
                             const PrefillOptions& options, PrefixCache* prefix_cache)
    : instance_(instance), blocks_(blocks), options_(options), prefix_cache_(prefix_cache) {
  thread_ = std::thread([this] { Loop(); });
}

PrefillEngine::~PrefillEngine() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  // The loop has exited; fail whatever is left.
  std::vector<std::shared_ptr<Pending>> left;
  {
    absl::MutexLock lock(&mu_);
    left.assign(queue_.begin(), queue_.end());
    left.insert(left.end(), active_.begin(), active_.end());
    queue_.clear();
    active_.clear();
  }
  for (auto& p : left) {
    if (!p->blocks.empty()) blocks_->Release(p->blocks);
    p->done(absl::UnavailableError("prefill engine is shutting down"));
  }
}

absl::Status PrefillEngine::Submit(PrefillJob request, PrefillCallback done) {
  const LlamaConfig& config = instance_->config();
  TANDEM_RETURN_IF_ERROR(CheckTokenIds(request.prompt, config.vocab_size, "prompt"));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingIds(request.sampling, config.vocab_size));
  if (NeedsContext(request.sampling) && request.sample_step >= request.prompt.size()) {
    return absl::InvalidArgumentError(absl::StrCat("sample_step ", request.sample_step,
                                                   " leaves no prompt in ", request.prompt.size(),
                                                   " prompt tokens"));
  }
  TANDEM_RETURN_IF_ERROR(CheckTokenBudget(request.reserve_tokens, "reserve_tokens", 0));
  TANDEM_RETURN_IF_ERROR(CheckChoices(request.choices));
  TANDEM_RETURN_IF_ERROR(CheckContextFit(static_cast<int64_t>(request.prompt.size()),
                                         request.reserve_tokens, "reserve_tokens",
                                         config.max_context));
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.reserve_tokens;
  const int64_t needed = VirtualBlocksFor(instance_->options().parallel.dcp_geometry(), total);
  if (needed > blocks_->total_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("request needs ", needed,
                                                     " KV blocks but the instance has only ",
                                                     blocks_->total_blocks(), " in total"));
  }
  auto p = std::make_shared<Pending>();
  if (!request.sampling.grammar.empty()) {
    // Compiled here, on the caller's thread, so a cache miss does not hold up the steps.
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar =
        CompileRequestGrammar(options_.grammars.get(), request.sampling.grammar);
    if (!grammar.ok()) return grammar.status();
    const absl::Span<const int32_t> generated =
        absl::MakeConstSpan(request.prompt).last(request.sample_step);
    TANDEM_ASSIGN_OR_RETURN(p->guided, GuidedDecoder::Create(*std::move(grammar), generated,
                                                             request.sampling.min_tokens_stop_ids));
  }
  if (prefix_cache_ != nullptr) p->chain = prefix_cache_->Chain(request.prompt);
  p->request = std::move(request);
  p->done = std::move(done);
  p->enqueued = absl::Now();
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("prefill engine is shutting down");
  queue_.push_back(std::move(p));
  return absl::OkStatus();
}

bool PrefillEngine::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto mark = [&](auto& list) {
    for (auto& p : list) {
      if (p->request.id == id && !p->cancelled) return p->cancelled = true;
    }
    return false;
  };
  return mark(queue_) || mark(active_);
}

int32_t PrefillEngine::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(queue_.size());
}

int32_t PrefillEngine::running() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(active_.size());
}

int64_t PrefillEngine::computed_tokens() const {
  absl::MutexLock lock(&mu_);
  return computed_tokens_;
}

int64_t PrefillEngine::pending_prompt_tokens() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& p : queue_) n += std::ssize(p->request.prompt);
  for (const auto& p : active_) n += std::ssize(p->request.prompt) - p->computed;
  return n;
}

absl::StatusOr<std::vector<int32_t>> PrefillEngine::AllocateFor(Pending& p, int64_t total_blocks) {
  if (prefix_cache_ == nullptr) return blocks_->Allocate(static_cast<int32_t>(total_blocks));
  // The last prompt token is always computed: its logits give the first token.
  const int64_t n = static_cast<int64_t>(p.request.prompt.size());
  std::vector<int32_t> table =
      prefix_cache_->Acquire(p.request.prompt, p.chain, (n - 1) / prefix_cache_->block_tokens());
  absl::StatusOr<std::vector<int32_t>> rest =
      prefix_cache_->Allocate(static_cast<int32_t>(total_blocks - std::ssize(table)));
  if (!rest.ok()) {
    blocks_->Release(table);
    return rest.status();
  }
  p.cached_tokens = std::ssize(table) * prefix_cache_->block_tokens();
  prefix_cache_->RecordLookup(n, p.cached_tokens);
  table.insert(table.end(), rest->begin(), rest->end());
  return table;
}

void PrefillEngine::Admit(std::vector<std::pair<std::shared_ptr<Pending>, absl::Status>>* failed,
                          std::vector<std::shared_ptr<Pending>>* admitted) {
  const DcpGeometry geom = instance_->options().parallel.dcp_geometry();
  const absl::Time now = absl::Now();
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancelled) {
      failed->emplace_back(*it, absl::CancelledError("prefill cancelled"));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  while (!queue_.empty() && static_cast<int32_t>(active_.size()) < options_.max_batch_requests) {
    std::shared_ptr<Pending> p = queue_.front();
    const int64_t total =
        static_cast<int64_t>(p->request.prompt.size()) + p->request.reserve_tokens;
    absl::StatusOr<std::vector<int32_t>> got = AllocateFor(*p, VirtualBlocksFor(geom, total));
    if (!got.ok()) {
      // FIFO: later requests wait behind this one; everyone past the timeout fails.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (now - (*it)->enqueued > options_.queue_timeout) {
          failed->emplace_back(
              *it, absl::ResourceExhaustedError(absl::StrCat(
                       "KV capacity short for ", absl::FormatDuration(options_.queue_timeout),
                       " (queue timeout): ", got.status().message())));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      return;
    }
    p->blocks = std::move(got).value();
    p->computed = p->cached_tokens;
    p->staged = p->cached_tokens;
    p->reported = p->cached_tokens;
    if (p->request.on_progress) admitted->push_back(p);
    queue_.pop_front();
    active_.push_back(std::move(p));
  }
}

void PrefillEngine::Loop() {
  const int64_t vocab = instance_->config().vocab_size;
  while (true) {
    std::vector<std::pair<std::shared_ptr<Pending>, absl::Status>> failed;
    std::vector<std::shared_ptr<Pending>> in_step;
    std::vector<std::shared_ptr<Pending>> admitted;
    StepInput step;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty() || !active_.empty();
      };
      mu_.Await(absl::Condition(&has_work));
      if (stopping_) return;
      Admit(&failed, &admitted);
      // Drop cancelled active requests.
      for (auto it = active_.begin(); it != active_.end();) {
        if ((*it)->cancelled) {
          failed.emplace_back(*it, (*it)->failure.ok() ? absl::CancelledError("prefill cancelled")
                                                       : (*it)->failure);
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
      // A request cancelled as it was admitted is failed above: no progress after its `done`.
      std::erase_if(admitted, [](const std::shared_ptr<Pending>& p) { return p->cancelled; });
      int64_t budget = options_.max_prefill_tokens;
      for (auto& p : active_) {
        if (budget <= 0) break;
        const int64_t n = static_cast<int64_t>(p->request.prompt.size());
        const int64_t chunk = std::min(budget, n - p->computed);
        StepRequest sr;
        sr.start_position = p->computed;
        sr.tokens.assign(p->request.prompt.begin() + p->computed,
                         p->request.prompt.begin() + p->computed + chunk);
        sr.block_table = p->blocks;
        sr.want_logits = p->computed + chunk == n;
        step.requests.push_back(std::move(sr));
        in_step.push_back(p);
        budget -= chunk;
      }
    }
    for (auto& [p, status] : failed) {
      if (!p->blocks.empty()) blocks_->Release(p->blocks);
      p->done(status);
    }
    for (const auto& p : admitted) p->request.on_progress(p->blocks, p->cached_tokens);
    if (in_step.empty()) {
      // Waiting for capacity only: re-check after a short, bounded pause.
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), kCapacityPoll);
      continue;
    }
    absl::StatusOr<std::vector<float>> logits = instance_->Run(step);
    std::vector<std::pair<std::shared_ptr<Pending>, absl::StatusOr<PrefillResult>>> finished;
    std::vector<std::shared_ptr<Pending>> progressed;  // unfinished, with on_progress
    {
      absl::MutexLock lock(&mu_);
      int64_t logit_row = 0;
      for (size_t i = 0; i < in_step.size(); ++i) {
        Pending& p = *in_step[i];
        const bool last = step.requests[i].want_logits;
        if (!logits.ok()) {
          finished.emplace_back(in_step[i], logits.status());
          continue;
        }
        p.computed += static_cast<int64_t>(step.requests[i].tokens.size());
        computed_tokens_ += static_cast<int64_t>(step.requests[i].tokens.size());
        if (!last) {
          if (p.request.on_progress) progressed.push_back(in_step[i]);
          continue;
        }
        absl::Span<const float> row(logits->data() + logit_row * vocab, vocab);
        ++logit_row;
        PrefillResult r;
        r.num_tokens = p.computed;
        const SamplingParams& sampling = p.request.sampling;
        std::optional<TokenHistory> history;
        if (UsesPenalties(sampling)) {
          history.emplace(p.request.prompt, static_cast<int64_t>(p.request.sample_step));
        }
        const TokenHistory* h = history.has_value() ? &*history : nullptr;
        r.first_token = p.guided.has_value()
                            ? p.guided->Sample(row, sampling, p.request.sample_step, h)
                            : SampleToken(row, sampling, p.request.sample_step, h);
        if (r.first_token < 0) {
          finished.emplace_back(
              in_step[i], absl::InternalError(absl::StrCat("request ", p.request.id,
                                                           ": the grammar allows no first token")));
          continue;
        }
        if (sampling.logprobs >= 0) {
          r.first_logprobs = ComputeLogprobs(row, r.first_token, sampling.logprobs);
        }
        if (p.request.choices > 1) {
          // Choice c samples the same row with its own seed (a grammar's Sample leaves its
          // matcher as it was, so every choice starts from the same state).
          r.choice_tokens.push_back(r.first_token);
          if (sampling.logprobs >= 0) r.choice_logprobs.push_back(r.first_logprobs);
          SamplingParams own = sampling;
          for (int32_t c = 1; c < p.request.choices; ++c) {
            own.seed = sampling.seed + static_cast<uint64_t>(c);
            const int32_t t = p.guided.has_value()
                                  ? p.guided->Sample(row, own, p.request.sample_step, h)
                                  : SampleToken(row, own, p.request.sample_step, h);
            r.choice_tokens.push_back(t);
            if (sampling.logprobs >= 0) {  // t >= 0: the mask is choice 0's, which sampled
              r.choice_logprobs.push_back(ComputeLogprobs(row, t, sampling.logprobs));
            }
          }
        }
        if (p.request.return_logits) r.logits.assign(row.begin(), row.end());
        r.block_table = p.blocks;
        r.cached_tokens = p.cached_tokens;
        finished.emplace_back(in_step[i], std::move(r));
      }
      for (auto& [p, r] : finished) {
        active_.erase(std::find(active_.begin(), active_.end(), p));
      }
    }
    // A staged instance (device pools) serves KV from host mirrors: copy the finished
    // requests' blocks there before anyone is told the KV is ready. Cached blocks are already
    // there (and may be being read by a transfer): only the blocks computed here are copied —
    // from the block of the first token not staged yet (a pipelined request's earlier chunks
    // were staged after their step; the block they ended in is copied again, whole).
    const int64_t block_tokens = VirtualBlockTokens(instance_->options().parallel.dcp_geometry());
    std::vector<int32_t> staged;
    for (auto& [p, r] : finished) {
      if (!r.ok()) continue;
      staged.insert(staged.end(), p->blocks.begin() + p->staged / block_tokens, p->blocks.end());
    }
    if (const absl::Status s = instance_->StageOut(staged); !s.ok()) {
      for (auto& [p, r] : finished) {
        if (r.ok())
          r = absl::Status(s.code(), absl::StrCat("staging the KV to host memory: ", s.message()));
      }
    }
    // The KV written since the last report, once it is where transfers read it: the digest
    // hook (issue 28). Finished requests were staged above; pipelined ones are staged chunk by
    // chunk below; the others' chunks are in place at once unless the instance stages (then
    // their KV reaches host memory when they finish, and is reported then).
    auto report_written = [](const std::shared_ptr<Pending>& p) {
      if (!p->request.on_kv_written || p->computed <= p->reported) return;
      p->request.on_kv_written(p->blocks, p->reported, p->computed);
      p->reported = p->computed;
    };
    for (auto& [p, r] : finished) {
      if (r.ok()) report_written(p);
    }
    if (!instance_->staged()) {
      for (const auto& p : in_step) {
        if (!p->request.on_progress) report_written(p);  // finished ones: no-op now
      }
    }
    // Pipelined requests still running: stage the chunk just computed, then report it.
    for (const auto& p : progressed) {
      const int64_t end_block = (p->computed + block_tokens - 1) / block_tokens;
      const std::vector<int32_t> chunk(p->blocks.begin() + p->staged / block_tokens,
                                       p->blocks.begin() + end_block);
      if (const absl::Status s = instance_->StageOut(chunk); !s.ok()) {
        // The request cannot be served from this instance: fail it at the next step.
        absl::MutexLock lock(&mu_);
        p->cancelled = true;
        p->failure = absl::Status(
            s.code(), absl::StrCat("staging a prefill chunk to host memory: ", s.message()));
        continue;
      }
      p->staged = p->computed;
      report_written(p);
      p->request.on_progress(p->blocks, p->computed);
    }
    for (auto& [p, r] : finished) {
      if (!r.ok()) {
        blocks_->Release(p->blocks);
      } else if (prefix_cache_ != nullptr) {
        // Before `done`: once the caller has the table it may release it at any time.
        prefix_cache_->Insert(p->request.prompt, p->chain, p->blocks);
      }
      p->done(std::move(r));
    }
  }
}

}  // namespace tandem
