#include "model/grammar/grammar_cache.h"

#include <utility>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/regex.h"
#include "nlohmann/json.hpp"

namespace tandem {

const char* GrammarKindName(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kGbnf:
      return "gbnf";
    case GrammarKind::kRegex:
      return "regex";
    case GrammarKind::kJsonSchema:
      return "json_schema";
    case GrammarKind::kJsonObject:
      return "json_object";
  }
  return "?";
}

absl::StatusOr<std::string> GrammarTextToGbnf(GrammarKind kind, std::string_view text) {
  switch (kind) {
    case GrammarKind::kGbnf:
      return std::string(text);
    case GrammarKind::kRegex:
      return RegexToGbnf(text, "root");
    case GrammarKind::kJsonSchema:
      return JsonSchemaTextToGbnf(text, "root");
    case GrammarKind::kJsonObject:
      return JsonObjectGbnf("root");
  }
  return absl::InvalidArgumentError("grammar: unknown kind");
}

GrammarCache::GrammarCache(Vocabulary vocabulary, size_t capacity)
    : vocabulary_(std::move(vocabulary)), lru_(capacity) {}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::Get(GrammarKind kind,
                                                                         std::string_view text) {
  Key key{static_cast<uint8_t>(kind), std::string(text)};
  if (kind == GrammarKind::kJsonObject) {
    key.second.clear();
  } else if (kind == GrammarKind::kJsonSchema) {
    // One entry per schema, however it is spaced (key order is kept: it orders properties).
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, false);
    if (doc.is_discarded()) return absl::InvalidArgumentError("json_schema: not valid JSON");
    key.second = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  {
    absl::MutexLock lock(&mu_);
    if (std::optional<std::shared_ptr<const CompiledGrammar>> hit = lru_.Find(key)) {
      ++hits_;
      return *std::move(hit);
    }
    ++misses_;
  }
  TANDEM_ASSIGN_OR_RETURN(std::string gbnf, GrammarTextToGbnf(kind, key.second));
  TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> compiled,
                          CompileGrammar(gbnf, vocabulary_));
  absl::MutexLock lock(&mu_);
  if (std::optional<std::shared_ptr<const CompiledGrammar>> raced = lru_.Find(key)) {
    return *std::move(raced);
  }
  lru_.Insert(key, compiled);
  return compiled;
}

size_t GrammarCache::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

int64_t GrammarCache::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

int64_t GrammarCache::misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

}  // namespace tandem
