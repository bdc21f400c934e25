// A GBNF grammar compiled against one vocabulary: what a GrammarMatcher runs on.
//
// Compiling (ParseGbnf, then):
//  1. small rules that are not recursive are inlined (a JSON string's character rule into the
//     loop that reads characters), so a rule frame spans what follows a position;
//  2. every character class is lowered to a UTF-8 byte automaton, so the grammar and its matcher
//     are byte-level (a token may end inside a multi-byte character; the next one continues it);
//  3. the rules are flattened into one element array; a "location" is a class element in one of
//     its automaton states (the top of a matcher stack is always one). Counted repetitions
//     ({2,5}, {0,200}) stay one copy: the matcher's stack frames carry a round counter;
//  4. for every location, the tokens are sorted into three sets by walking the token trie with
//     only that location's rule frame on the stack (xgrammar's adaptive token-mask cache):
//     accepted in every context (the token's bytes are consumed inside the frame), rejected in
//     every context (every path dies inside the frame), and uncertain (some path leaves the
//     frame with bytes left, so the frames below decide).
// A decode step ORs the accepted sets of the state's stack tops and checks only the uncertain
// tokens byte by byte. Where one frame leaves many tokens uncertain (near the end of a
// repetition, in whitespace before a key), the matcher uses the sets of the top 2, 3, ... frames
// instead, computed on first use by re-walking only the uncertain tokens and kept in the
// grammar (as are the sets of repetition counters near their bounds). The walks use a lazily
// built DFA over frame-local stack sets, so each trie node costs a table look-up.
//
// Thread-safe: share one CompiledGrammar between matchers and threads; the sets computed on
// first use are added under a mutex and never change or move afterwards.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/vocabulary.h"

namespace tandem {

namespace grammar_internal {
struct CompiledGrammarData;
}  // namespace grammar_internal

class CompiledGrammar {
 public:
  struct Stats {
    int32_t rules = 0;             // after lowering
    int32_t positions = 0;         // locations whose one-frame sets were built at compile time
    int64_t uncertain_tokens = 0;  // summed over those
    int64_t cache_bytes = 0;       // their token sets
    double compile_ms = 0;
  };

  const Vocabulary& vocabulary() const;
  int32_t vocab_size() const;
  const Stats& stats() const;
  // The parsed grammar (before lowering).
  const GbnfGrammar& gbnf() const;

  const grammar_internal::CompiledGrammarData& data() const { return *data_; }

  explicit CompiledGrammar(std::unique_ptr<grammar_internal::CompiledGrammarData> data);
  ~CompiledGrammar();

 private:
  std::unique_ptr<grammar_internal::CompiledGrammarData> data_;
};

// InvalidArgument for a grammar ParseGbnf refuses (line/column in the message).
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(
    std::string_view gbnf, const Vocabulary& vocabulary, std::string_view root_rule = "root");

// The same from an already parsed grammar.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(GbnfGrammar grammar,
                                                                      const Vocabulary& vocabulary);

}  // namespace tandem
