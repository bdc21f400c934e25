// Sampling under a grammar (issue 25; docs/structured_output.md): the per-request state a node
// keeps for SamplingParams::grammar, and the masked draw.
//
// Semantics (vLLM's): the grammar's mask applies to the raw logits, before every step of
// model/sampling.h (min_tokens, logit_bias, penalties, temperature, min_p, top_k, top_p), so
// truncation and the draw see only the tokens the grammar allows. A stop id is allowed iff the
// grammar is complete there (GrammarMatcher::CanTerminate); every other id iff the matcher
// allows it. So an output that ends on a stop id (finish_reason "stop") is a sentence of the
// grammar.
//
// Speed (llama.cpp's lazy path): a greedy draw takes the unmasked argmax and checks only that
// token (one trie walk); only when the grammar rejects it is the full mask computed. That is
// exact: the argmax over the allowed tokens is the unmasked argmax whenever the latter is
// allowed (ties keep the lowest id either way). A sampled draw always masks first, since
// truncation (top_p, top_k, min_p) and the counter-based draw depend on the whole allowed set.
//
// Replay: a request resumed or retried elsewhere arrives with the tokens it already generated;
// Create accepts them in order, so the state is the one the failed node had.
//
// Not thread-safe: one engine thread owns a request's decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/grammar_cache.h"
#include "model/grammar/matcher.h"
#include "model/sampling.h"

namespace tandem {

class TokenHistory;
class Tokenizer;

// A node's cache of compiled grammars over `tokenizer`'s vocabulary (64 grammars, LRU); null
// when the model has no tokenizer (grammar requests are then refused).
std::shared_ptr<GrammarCache> MakeGrammarCache(const Tokenizer* tokenizer);

// A request's SamplingParams::grammar (GBNF) compiled through a node's `cache`, on the caller's
// thread (a miss costs milliseconds). FailedPrecondition when `cache` is null (no tokenizer);
// InvalidArgument "sampling.grammar: ..." when the grammar does not compile.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileRequestGrammar(GrammarCache* cache,
                                                                             std::string_view gbnf);

class GuidedDecoder {
 public:
  struct Stats {
    int64_t draws = 0;
    int64_t full_masks = 0;  // draws that computed the whole mask (sampled, or lazy rejected)
  };

  // `generated`: the request's tokens so far (replayed; a stop id among them is an error).
  // InvalidArgument naming the index of the first token the grammar does not allow.
  static absl::StatusOr<GuidedDecoder> Create(std::shared_ptr<const CompiledGrammar> grammar,
                                              absl::Span<const int32_t> generated,
                                              std::vector<int32_t> stop_ids);

  // Draw `step` (model/sampling.h's arguments) restricted as above. Returns -1 only when the
  // grammar allows no token at all and no stop id (the vocabulary cannot spell any continuation).
  // REQUIRES: logits.size() >= the grammar's vocabulary; !IsTerminated().
  int32_t Sample(absl::Span<const float> logits, const SamplingParams& params, uint64_t step,
                 const TokenHistory* history = nullptr);

  // Advances past a sampled token. A stop id changes nothing (the request ends on it).
  // InvalidArgument when the grammar does not allow `token`.
  absl::Status Accept(int32_t token);

  // Complete, and nothing may follow: the request must stop here (finish_reason "stop").
  bool IsTerminated() const { return matcher_.IsTerminated(); }
  bool CanTerminate() const { return matcher_.CanTerminate(); }
  bool IsAllowed(int32_t token) const;
  const Stats& stats() const { return stats_; }

 private:
  GuidedDecoder(GrammarMatcher matcher, std::vector<int32_t> stop_ids)
      : matcher_(std::move(matcher)), stop_ids_(std::move(stop_ids)) {}
  bool IsStop(int32_t token) const;
  // logits with -inf wherever the grammar (or CanTerminate, for stop ids) refuses.
  void Mask(absl::Span<const float> logits, std::vector<float>* out);

  GrammarMatcher matcher_;
  std::vector<int32_t> stop_ids_;
  std::vector<uint64_t> bits_;
  std::vector<float> masked_;
  Stats stats_;
};

}  // namespace tandem
