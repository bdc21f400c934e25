// A GBNF grammar compiled against one vocabulary: what a GrammarMatcher runs on.
//
// Compiling (ParseGbnf, then):
//  1. every character class is lowered to UTF-8 byte sequences, so the grammar and its matcher
//     are byte-level (a token may end inside a multi-byte character; the next one continues it);
//  2. the rules are flattened into one element array; a "position" is a byte-class element of
//     it (the top of a matcher stack is always one);
//  3. for every position, the tokens are sorted into three sets by walking the token trie with
//     only that position's rule frame on the stack (xgrammar's adaptive token-mask cache):
//     accepted in every context (the token's bytes are consumed inside the frame),
//     rejected in every context (every path dies inside the frame), and uncertain (some path
//     leaves the frame with bytes left, so the stack below decides). A decode step ORs the
//     accepted sets of the state's positions and checks only the uncertain tokens byte by byte.
// The walk uses a lazily built DFA over frame-local stack sets, so each trie node costs a table
// look-up; a grammar's broad positions (any character of a JSON string) cost about a trie walk.
//
// Immutable after CompileGrammar; share it between matchers and threads.
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
    int32_t positions = 0;         // byte-class elements
    int64_t uncertain_tokens = 0;  // summed over positions
    int64_t cache_bytes = 0;       // the per-position token sets
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
