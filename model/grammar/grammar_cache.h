// A bounded LRU of compiled grammars, keyed by (kind, text), so a node compiles a schema once.
//
// Get converts the text to GBNF for its kind (JSON Schema text is parsed and re-serialised, so
// two spellings of one schema share an entry), compiles it against the cache's vocabulary on a
// miss and keeps it; errors are returned, not cached. Compilation runs outside the lock (two
// threads missing on one key both compile; the first result is kept).
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/lru_map.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/vocabulary.h"

namespace tandem {

enum class GrammarKind : uint8_t {
  kGbnf,        // text: GBNF with a "root" rule
  kRegex,       // text: a regex (full match)
  kJsonSchema,  // text: a JSON Schema document
  kJsonObject,  // text ignored: any JSON object
};

const char* GrammarKindName(GrammarKind kind);

// The GBNF (root rule "root") for text of that kind; InvalidArgument as the front end says.
absl::StatusOr<std::string> GrammarTextToGbnf(GrammarKind kind, std::string_view text);

class GrammarCache {
 public:
  explicit GrammarCache(Vocabulary vocabulary, size_t capacity = 64);

  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Get(GrammarKind kind,
                                                             std::string_view text);

  const Vocabulary& vocabulary() const { return vocabulary_; }
  size_t size() const;
  int64_t hits() const;
  int64_t misses() const;

 private:
  using Key = std::pair<uint8_t, std::string>;
  const Vocabulary vocabulary_;
  mutable absl::Mutex mu_;
  LruMap<Key, std::shared_ptr<const CompiledGrammar>> lru_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem
