// GBNF, llama.cpp's grammar format, parsed into a small IR (issue 25 item 1).
//
// Tandem's grammar engine is written here, not taken from a package: xgrammar and llguidance
// (the engines vLLM/SGLang/TRT-LLM use) are not packaged for Debian or as C++ on PyPI. Their
// designs (a byte-level pushdown matcher, a token trie, cached context-independent tokens) are
// what model/grammar/ follows; no code is copied from them.
//
// Syntax accepted (llama.cpp's grammars/README.md):
//   rule     ::= name "::=" alternatives            (a rule may be continued on later lines;
//                                                    it ends where the next "name ::=" starts)
//   name     : [a-zA-Z0-9_-]+                       ('_' accepted besides llama.cpp's set)
//   alternatives : sequence ("|" sequence)*         (an empty sequence matches "")
//   item     : "literal"  |  [class]  |  [^class]  |  .  |  name  |  "(" alternatives ")"
//              followed by at most one of  ?  *  +  {m}  {m,}  {m,n}
//   escapes in literals and classes: \n \r \t \\ \" \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH
//   (\xHH is the code point U+00HH, as in llama.cpp); "#" starts a comment to the line end.
// Literals and classes are over Unicode code points (UTF-8 in the text); `.` is any code point.
// The IR desugars groups and repetitions into generated rules (named "<rule>-<n>"), so an
// element is only a character class or a rule reference: `?` an optional rule, `*` a
// right-recursive rule, `+` a copy and a `*` rule, other counts ({2,5}, {3,}, {0,200}) a
// counted repetition rule (GbnfRule::repeat), which the matcher runs with a counter instead of
// copies. A group of one element is that element.
//
// Checked here, so every consumer (CompileGrammar, the JSON Schema and regex front ends) gets
// it: every referenced rule is defined, the root rule exists, every rule can derive some finite
// string, and no rule is left-recursive in a way the matcher's stacks cannot express (a cycle
// of leftmost references through a non-tail position, e.g. `a ::= a "x" | "y"` or `a ::= b* a`).
// Bounds (so hostile text cannot exhaust memory): 1 MiB of text, 200 levels of group nesting,
// repetition counts up to 10,000, at most 2^20 elements.
// Errors are InvalidArgument "gbnf: line L, column C: ..." (1-based; columns count bytes).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem {

struct GbnfCharRange {
  uint32_t lo = 0;  // inclusive code points
  uint32_t hi = 0;
};

struct GbnfElement {
  enum class Kind : uint8_t { kChars, kRuleRef };
  Kind kind = Kind::kChars;
  // kChars: one code point in `ranges` (or, when negated, any code point outside them; `.` is
  // a negated empty class).
  bool negated = false;
  std::vector<GbnfCharRange> ranges;
  int32_t rule = -1;  // kRuleRef: index into GbnfGrammar::rules
};

using GbnfSequence = std::vector<GbnfElement>;

struct GbnfRule {
  std::string name;
  std::vector<GbnfSequence> alternatives;
  bool generated = false;  // made by desugaring a group or repetition
  // A counted repetition: the rule matches [repeat_min, repeat_max] (max -1: unbounded)
  // consecutive matches of its alternatives. Written `name ::= (alternatives){m,n}`.
  bool repeat = false;
  int32_t repeat_min = 0;
  int32_t repeat_max = -1;
};

struct GbnfGrammar {
  std::vector<GbnfRule> rules;
  int32_t root = -1;

  // -1 when there is no rule of that name.
  int32_t FindRule(std::string_view name) const;
  // The grammar back as GBNF text (generated rules included); ParseGbnf accepts it.
  std::string ToString() const;
};

// Parses `text`; `root_rule` names the start symbol.
absl::StatusOr<GbnfGrammar> ParseGbnf(std::string_view text, std::string_view root_rule = "root");

// A GBNF literal ("...", quotes included) that matches exactly `utf8` (which must be valid
// UTF-8; invalid bytes are written as \xHH code points). Used by the front ends.
std::string GbnfLiteral(std::string_view utf8);

// True for a valid rule name ([a-zA-Z0-9_-]+).
bool IsGbnfRuleName(std::string_view name);

}  // namespace tandem
