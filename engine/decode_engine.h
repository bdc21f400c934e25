// Continuous-batched decode on one instance (docs/design.md#request-lifecycle, #dcp-attention).
// Requests join and leave between steps; each step feeds every running request's last token at its
// next position (the new K/V is written on its owner rank, then DCP attention runs), samples, and
// finishes requests on a stop token or their token budget, freeing their KV blocks.
//
// A request arrives with its prompt's KV already in this instance's pools (transferred from a
// prefill instance, or computed by a PrefillEngine on the same instance) and a block table that
// covers prompt + max_new_tokens positions; the engine owns those blocks from Add() on and frees
// them when the request ends, whatever the reason. Requests beyond `max_batch` wait in a queue.
//
// Callbacks run on the scheduler thread, in order per request; on_done is called exactly once.
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
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/finish_reason.h"
#include "engine/block_manager.h"
#include "engine/instance.h"
#include "model/grammar/grammar_cache.h"
#include "model/guided_sampling.h"
#include "model/logprobs.h"
#include "model/sampling.h"
#include "model/token_history.h"

namespace tandem {

struct DecodeOptions {
  int32_t max_batch = 64;
  // Compiles SamplingParams::grammar (model/grammar/grammar_cache.h); null: grammar requests are
  // refused (FAILED_PRECONDITION: the model has no tokenizer to build a vocabulary from).
  std::shared_ptr<GrammarCache> grammars;
};

// One request's decode as the engine runs it (the node builds it from a v1::DecodeRequest and its
// pulled KV; named apart from that message, which carries more and in wire form).
struct DecodeJob {
  std::string id;
  int64_t prompt_len = 0;            // KV of positions [0, prompt_len) is in the pools
  int32_t first_token = 0;           // the token at position prompt_len (sampled by prefill)
  std::vector<int32_t> block_table;  // covers prompt_len + max_new_tokens positions
  SamplingParams sampling;
  int32_t max_new_tokens = 1;     // generated tokens in total, first_token included
  std::vector<int32_t> stop_ids;  // a sampled stop id ends the request (not emitted)
  uint64_t next_step = 1;         // sampling draw number of the next token
  bool return_logits = false;     // pass each step's logits to on_logits (tests)
  // The ids at positions [0, prompt_len) (prompt, then the request's earlier generated tokens: its
  // last next_step - 1 are output, model/token_history.h). Required, that many, when
  // NeedsContext(sampling) (penalties read it; a grammar replays its generated tokens); ignored
  // otherwise.
  std::vector<int32_t> context;
};

struct DecodeCallbacks {
  std::function<void(int32_t token)> on_token;  // each generated token after first_token
  // Optional; with sampling.logprobs >= 0, called just before on_token with that token's
  // log-probabilities (model/logprobs.h).
  std::function<void(const TokenLogprobs& logprobs)> on_logprobs;
  // status OK for kStop / kLength; `generated` counts first_token too.
  std::function<void(absl::Status status, FinishReason reason, int32_t generated)> on_done;
  std::function<void(const std::vector<float>& logits)> on_logits;  // optional
};

class DecodeEngine {
 public:
  DecodeEngine(Instance* instance, BlockManager* blocks, const DecodeOptions& options);
  ~DecodeEngine();  // ends every request with UNAVAILABLE and frees its blocks
  DecodeEngine(const DecodeEngine&) = delete;
  DecodeEngine& operator=(const DecodeEngine&) = delete;

  // INVALID_ARGUMENT (blocks not taken, callbacks not called) when the block table is too short,
  // sampling values are bad (ids beyond the vocabulary included), max_new_tokens < 1, the
  // penalties or the grammar need a context of prompt_len ids and got another size, the grammar
  // does not compile, or the generated tokens (the context's last next_step - 1, then
  // first_token) are not a prefix the grammar allows. A grammar is compiled here, through
  // options.grammars, on the caller's thread (a cache miss costs milliseconds; steps go on).
  absl::Status Add(DecodeJob request, DecodeCallbacks callbacks);
  // True if a request of that id was still running or queued (every one of that id — the choices
  // of an n > 1 call share it — then ends with CANCELLED).
  bool Cancel(const std::string& id);

  int32_t running() const;
  int32_t queued() const;

 private:
  struct Active {
    DecodeJob request;
    DecodeCallbacks callbacks;
    int32_t last_token = 0;
    int32_t generated = 1;  // first_token counts
    bool cancelled = false;
    TokenHistory history;  // with UsesPenalties(request.sampling): context + generated tokens
    std::optional<GuidedDecoder> guided;  // with a grammar
  };
  // The request's grammar compiled and replayed over its generated tokens.
  absl::StatusOr<GuidedDecoder> StartGuided(const DecodeJob& request) const;
  void Loop();
  void Finish(Active& a, absl::Status status, FinishReason reason);

  Instance* const instance_;
  BlockManager* const blocks_;
  const DecodeOptions options_;

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<Active>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Active>> running_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tandem
