// The incremental matcher: where a sequence stands in its grammar, and which tokens may come
// next (issue 25 item 1).
//
// State: a set of stacks (a byte-level pushdown automaton, as llama.cpp's grammar sampler keeps
// it, with stacks shared as persistent linked lists and identical stacks merged). Each stack's
// top is a byte-class location of the CompiledGrammar; a frame of a counted repetition carries
// its round counter.
//
// The matcher knows nothing of end-of-sequence tokens: the caller allows the model's stop
// tokens iff CanTerminate(), and must stop when IsTerminated() (no further byte can follow).
// Special (control) tokens are never allowed; see Vocabulary.
//
// Speed: FillAllowedMask ORs the precomputed accepted sets of the state's stack tops and checks
// only the uncertain tokens; IsAllowed looks the token up in the same sets and walks its bytes
// only when it is uncertain (cheap: llama.cpp's lazy path, sample first and compute the mask only
// when the sampled token is rejected). The first visit of some states computes token sets the
// grammar then keeps (CompiledGrammar), so a grammar's first request is slower than later ones.
//
// Copyable (a copy is an independent fork, for n > 1 choices). Not thread-safe, const methods
// included (they use scratch space): one matcher per sequence, or lock around it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/grammar/compiled_grammar.h"

namespace tandem {

namespace grammar_internal {
class MatcherState;
}  // namespace grammar_internal

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  GrammarMatcher(const GrammarMatcher& other);
  GrammarMatcher& operator=(const GrammarMatcher& other);
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;
  ~GrammarMatcher();

  // Whether `token` may come next (false for ids out of range and never-allowed tokens).
  bool IsAllowed(int32_t token) const;
  // Advances past `token`. InvalidArgument (state unchanged) when it is not allowed.
  absl::Status Accept(int32_t token);
  // Accept each in turn (replay of emitted tokens after a retry or resume). On error the
  // state is that after the tokens before the failing one; the message names its index.
  absl::Status AcceptAll(absl::Span<const int32_t> tokens);
  // Advances past raw bytes (a forced prefix the caller emits itself). InvalidArgument (state
  // unchanged) when the grammar does not allow them.
  absl::Status AcceptBytes(std::string_view bytes);

  // bits: resized to (vocab_size + 63) / 64 words; bit t (word t / 64, bit t % 64) set iff
  // IsAllowed(t).
  void FillAllowedMask(std::vector<uint64_t>* bits) const;

  // The grammar is complete here: the caller may allow end-of-sequence tokens.
  bool CanTerminate() const;
  // Complete and no further byte possible: the caller must stop.
  bool IsTerminated() const;

  int32_t vocab_size() const;
  // The state for debugging: stacks, and per cache key its accepted/uncertain counts.
  std::string DebugString() const;
  const std::shared_ptr<const CompiledGrammar>& grammar() const { return grammar_; }
  // Tokens accepted so far (Accept, AcceptAll).
  int64_t tokens_accepted() const { return tokens_accepted_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<grammar_internal::MatcherState> state_;
  int64_t tokens_accepted_ = 0;
};

}  // namespace tandem
