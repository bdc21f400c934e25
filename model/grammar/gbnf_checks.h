// Checks over a parsed GBNF grammar, used by ParseGbnf (gbnf.h) after it resolved names and
// sorted rules. `offsets[r]` is the byte offset in `text` of rule r's definition (a generated
// rule carries its defining rule's offset); errors point there as "gbnf: line L, column C: ...".
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "model/grammar/gbnf.h"

namespace tandem::gbnf_internal {

// InvalidArgument "gbnf: line L, column C: <message>" for byte `offset` of `text` (1-based
// lines and byte columns).
absl::Status ErrorAt(std::string_view text, size_t offset, std::string_view message);

// Every rule can derive some finite string; otherwise names the rule (its user-visible owner
// for a generated one) that needs itself or an empty character class.
absl::Status CheckProductive(const GbnfGrammar& grammar, const std::vector<size_t>& offsets,
                             std::string_view text);

// No cycle of leftmost references through a non-tail position (`a ::= a "x" | "y"`).
absl::Status CheckLeftRecursion(const GbnfGrammar& grammar, const std::vector<size_t>& offsets,
                                std::string_view text);

}  // namespace tandem::gbnf_internal
