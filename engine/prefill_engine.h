// Prefill scheduling on one instance (docs/design.md#request-lifecycle, #pcp-partition): prompts
// are queued, given KV blocks, chunked to at most `max_prefill_tokens` tokens per step (several
// prompts share a step), run through the PCP/DCP forward, and their first token is sampled. The
// blocks stay allocated when a request completes: the caller owns them (hands them to a decode
// engine, or frees them via BlockManager when the KV has been transferred or its lease expired).
//
// A request that cannot get blocks waits in FIFO order; past `queue_timeout` it fails with
// RESOURCE_EXHAUSTED. Cancel() removes a request at the next step boundary and frees its blocks.
//
// With a PrefixCache (engine/prefix_cache.h), a request admitted with a cached prefix starts with
// those blocks at the head of its table and `computed` at the prefix length, exactly as if its
// earlier chunks had run: only the suffix is computed, attending the cached KV like chunked
// prefill attends its earlier chunks (at least the last prompt token is always computed, for its
// logits). A successful request's full blocks are inserted into the cache when it completes; the
// caller still owns the request's references (result.block_table), the cache holds its own.
// Callbacks run on the engine's scheduler thread and must not block for long.
//
// Thread-safety: all public methods are thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/block_manager.h"
#include "engine/instance.h"
#include "engine/prefix_cache.h"
#include "model/grammar/grammar_cache.h"
#include "model/guided_sampling.h"
#include "model/logprobs.h"
#include "model/sampling.h"

namespace tandem {

struct PrefillOptions {
  int64_t max_prefill_tokens = 2048;  // tokens per forward step (chunked prefill)
  int32_t max_batch_requests = 64;
  absl::Duration queue_timeout = absl::Seconds(30);
  // Compiles SamplingParams::grammar (model/grammar/grammar_cache.h); null: grammar requests are
  // refused (FAILED_PRECONDITION: the model has no tokenizer to build a vocabulary from).
  std::shared_ptr<GrammarCache> grammars;
};

// One prompt's prefill as the engine runs it (the node builds it from a v1::PrefillRequest; named
// apart from that message, which carries more and in wire form).
struct PrefillJob {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t reserve_tokens = 0;  // capacity to allocate beyond the prompt (combined mode)
  // Sampling draw number of the token sampled here; the prompt's last sample_step ids are the
  // request's earlier generated tokens (a resume), which the penalties count as output and a
  // grammar replays (sampling.min_tokens_stop_ids are then the stop ids the grammar allows
  // where it is complete, model/guided_sampling.h).
  uint64_t sample_step = 0;
  bool return_logits = false;  // copy the last position's logits into the result
  // n > 1 from one prefill: first tokens to sample from the last position's logits, choice i with
  // sampling.seed + i (PrefillResult::choice_tokens). 1: first_token only.
  int32_t choices = 1;
  // Pipelined transfer (docs/kv_transfer.md): called on the scheduler thread once when the
  // request is admitted (its block table, tokens_ready = the cached prefix) and after every chunk
  // step that leaves the prompt unfinished (tokens_ready = prompt tokens whose KV is complete in
  // the blocks — staged to host memory on a staged instance). Never after `done`. Must not block
  // for long; must not call into the engine.
  std::function<void(const std::vector<int32_t>& blocks, int64_t tokens_ready)> on_progress;
  // Where the engine writes KV (issue 28: the prefill's KV digests are computed here, chunk by
  // chunk): called on the scheduler thread after every successful step that computed part of
  // this prompt, with the prompt tokens [begin, end) whose KV that step wrote, once it is in the
  // memory transfers read (staged to host on a staged instance) — before on_progress reports
  // those tokens and before `done`. Every computed token is reported exactly once, in order (a
  // cached prefix is not: it was written earlier). On a staged instance a request without
  // on_progress is staged only when it finishes, so its KV is reported then, as one range. Must
  // not block for long; must not call into the engine.
  std::function<void(const std::vector<int32_t>& blocks, int64_t begin, int64_t end)> on_kv_written;
};

struct PrefillResult {
  std::vector<int32_t> block_table;  // covers prompt + reserve_tokens
  int64_t num_tokens = 0;            // prompt length = tokens whose KV is in the blocks
  int32_t first_token = 0;
  std::vector<float> logits;     // [vocab] when return_logits
  int64_t cached_tokens = 0;     // prompt tokens whose KV came from the prefix cache (not computed)
  TokenLogprobs first_logprobs;  // first_token's, with sampling.logprobs >= 0
  // choices > 1: every choice's first token (choice_tokens[0] = first_token) and, with
  // sampling.logprobs >= 0, their log-probabilities; empty otherwise.
  std::vector<int32_t> choice_tokens;
  std::vector<TokenLogprobs> choice_logprobs;
};

using PrefillCallback = std::function<void(absl::StatusOr<PrefillResult>)>;

class PrefillEngine {
 public:
  // `prefix_cache` is optional (nullptr: every prompt is computed in full); it must share
  // `blocks` and outlive the engine.
  PrefillEngine(Instance* instance, BlockManager* blocks, const PrefillOptions& options,
                PrefixCache* prefix_cache = nullptr);
  ~PrefillEngine();  // fails pending requests with UNAVAILABLE, frees their blocks
  PrefillEngine(const PrefillEngine&) = delete;
  PrefillEngine& operator=(const PrefillEngine&) = delete;

  // INVALID_ARGUMENT for an empty prompt, bad token ids or sampling values (sample_step beyond
  // the prompt with a penalty or grammar set included; a grammar that does not compile, or that
  // the prompt's last sample_step ids do not match), or a request that
  // could never fit (prompt + reserve beyond the pool or the model context); `done` is then not
  // called. Otherwise `done` is called exactly once.
  absl::Status Submit(PrefillJob request, PrefillCallback done);
  // True if the request was still pending (it then completes with CANCELLED).
  bool Cancel(const std::string& id);

  int32_t queued() const;   // waiting for blocks
  int32_t running() const;  // holding blocks, prefill in progress
  // Prompt tokens run through the model in successful steps since start (cached ones excluded).
  int64_t computed_tokens() const;
  // Prompt tokens still to compute: queued prompts in full, running ones' remainder (a cached
  // prefix is known, and excluded, from admission on).
  int64_t pending_prompt_tokens() const;

 private:
  struct Pending {
    PrefillJob request;
    PrefillCallback done;
    absl::Time enqueued;
    std::vector<int32_t> blocks;
    std::vector<uint64_t> chain;  // prefix hash chain of the prompt (with a prefix cache)
    int64_t cached_tokens = 0;    // prompt tokens whose KV came from the prefix cache
    int64_t computed = 0;         // prompt tokens already run (or cached)
    int64_t staged = 0;           // prompt tokens staged out after a chunk (with on_progress)
    int64_t reported = 0;         // prompt tokens reported to on_kv_written
    bool cancelled = false;
    absl::Status failure;  // why a cancelled request failed, when not a Cancel() (OK: Cancel)
    std::optional<GuidedDecoder> guided;  // with a grammar: replayed over the generated tokens
  };
  void Loop();
  // Moves queued requests into `active_` while blocks allow (appending those with on_progress to
  // *admitted); fails those past their timeout.
  void Admit(std::vector<std::pair<std::shared_ptr<Pending>, absl::Status>>* failed,
             std::vector<std::shared_ptr<Pending>>* admitted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The blocks of `p`: its cached prefix (setting cached_tokens) and newly allocated ones.
  absl::StatusOr<std::vector<int32_t>> AllocateFor(Pending& p, int64_t total_blocks);

  Instance* const instance_;
  BlockManager* const blocks_;
  const PrefillOptions options_;
  PrefixCache* const prefix_cache_;

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<Pending>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Pending>> active_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t computed_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace tandem
