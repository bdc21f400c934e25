// The checks ParseGbnf runs on the grammar it built (see gbnf.h): every rule derives some finite
// text, and no rule is left-recursive in a way the matcher's stacks cannot express. Split from
// the parser so each reads on its own; both work on the finished IR and the rule offsets.
#include "model/grammar/gbnf_checks.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/grammar/string_view_util.h"

namespace tandem::gbnf_internal {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

bool ClassEmpty(const GbnfElement& e) {
  if (e.negated) {
    // Empty only when the ranges cover every scalar value.
    std::vector<GbnfCharRange> r = e.ranges;
    std::sort(r.begin(), r.end(),
              [](const GbnfCharRange& a, const GbnfCharRange& b) { return a.lo < b.lo; });
    uint32_t next = 0;  // first code point not yet covered
    for (const GbnfCharRange& x : r) {
      if (x.lo > next) {
        // [next, x.lo) uncovered; surrogates alone do not count.
        if (!(next >= 0xD800 && x.lo <= 0xE000)) return false;
      }
      next = std::max(next, x.hi + 1);
    }
    return next > kMaxCodepoint;
  }
  for (const GbnfCharRange& x : e.ranges) {
    if (x.lo < 0xD800 || x.hi > 0xDFFF) return false;
  }
  return true;
}

size_t RuleOwner(const GbnfGrammar& grammar, const std::vector<size_t>& offsets, size_t r) {
  // Generated rules carry their defining rule's offset; find the user rule with it.
  for (size_t u = 0; u < grammar.rules.size(); ++u) {
    if (!grammar.rules[u].generated && offsets[u] == offsets[r]) return u;
  }
  return r;
}

}  // namespace

absl::Status ErrorAt(std::string_view text, size_t offset, std::string_view message) {
  int line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("gbnf: line %d, column %d: %s", line, col, grammar_internal::Av(message)));
}

absl::Status CheckProductive(const GbnfGrammar& grammar, const std::vector<size_t>& offsets,
                             std::string_view text) {
  const size_t n = grammar.rules.size();
  std::vector<bool> productive(n, false);
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      if (grammar.rules[r].repeat && grammar.rules[r].repeat_min == 0) {
        productive[r] = true;
        changed = true;
        continue;
      }
      for (const GbnfSequence& seq : grammar.rules[r].alternatives) {
        bool ok = true;
        for (const GbnfElement& e : seq) {
          if (e.kind == GbnfElement::Kind::kRuleRef ? !productive[e.rule] : ClassEmpty(e)) {
            ok = false;
            break;
          }
        }
        if (ok) {
          productive[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  // Report the cause: an unproductive rule that needs itself or an empty class; the first
  // otherwise.
  size_t bad = n;
  for (size_t r = 0; r < n && bad == n; ++r) {
    if (productive[r]) continue;
    for (const GbnfSequence& seq : grammar.rules[r].alternatives) {
      for (const GbnfElement& e : seq) {
        if (e.kind == GbnfElement::Kind::kRuleRef ? e.rule == static_cast<int32_t>(r)
                                                  : ClassEmpty(e)) {
          bad = r;
        }
      }
    }
  }
  for (size_t r = 0; r < n && bad == n; ++r) {
    if (!productive[r]) bad = r;
  }
  if (bad < n) {
    const size_t owner = grammar.rules[bad].generated ? RuleOwner(grammar, offsets, bad) : bad;
    return ErrorAt(text, offsets[bad],
                   absl::StrCat("rule '", grammar.rules[owner].name,
                                "' matches no finite text (every alternative needs "
                                "itself or an empty character class)"));
  }
  return absl::OkStatus();
}

absl::Status CheckLeftRecursion(const GbnfGrammar& grammar, const std::vector<size_t>& offsets,
                                std::string_view text) {
  const size_t n = grammar.rules.size();
  std::vector<bool> nullable(n, false);
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      if (grammar.rules[r].repeat && grammar.rules[r].repeat_min == 0) {
        nullable[r] = true;
        changed = true;
        continue;
      }
      for (const GbnfSequence& seq : grammar.rules[r].alternatives) {
        bool all = true;
        for (const GbnfElement& e : seq) {
          if (e.kind != GbnfElement::Kind::kRuleRef || !nullable[e.rule]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  // Left-corner edges r -> s (s reachable with nothing consumed); `grows` when the reference
  // is not the last element of its alternative (the matcher keeps a continuation frame).
  struct Edge {
    int32_t to;
    bool grows;
  };
  std::vector<std::vector<Edge>> edges(n);
  for (size_t r = 0; r < n; ++r) {
    for (const GbnfSequence& seq : grammar.rules[r].alternatives) {
      for (size_t i = 0; i < seq.size(); ++i) {
        const GbnfElement& e = seq[i];
        if (e.kind != GbnfElement::Kind::kRuleRef) break;
        // In a repetition rule every alternative is followed by the next round.
        edges[r].push_back({e.rule, i + 1 < seq.size() || grammar.rules[r].repeat});
        if (!nullable[e.rule]) break;
      }
    }
  }
  // Tarjan's SCCs (iterative).
  std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<bool> on_stack(n, false);
  std::vector<int32_t> stack;
  int32_t counter = 0, comps = 0;
  struct Frame {
    int32_t v;
    size_t next;
  };
  for (size_t s = 0; s < n; ++s) {
    if (index[s] >= 0) continue;
    std::vector<Frame> call{{static_cast<int32_t>(s), 0}};
    index[s] = low[s] = counter++;
    stack.push_back(static_cast<int32_t>(s));
    on_stack[s] = true;
    while (!call.empty()) {
      Frame& f = call.back();
      if (f.next < edges[f.v].size()) {
        const int32_t w = edges[f.v][f.next++].to;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = true;
          call.push_back({w, 0});
        } else if (on_stack[w]) {
          low[f.v] = std::min(low[f.v], index[w]);
        }
      } else {
        const int32_t v = f.v;
        call.pop_back();
        if (!call.empty()) low[call.back().v] = std::min(low[call.back().v], low[v]);
        if (low[v] == index[v]) {
          while (true) {
            const int32_t w = stack.back();
            stack.pop_back();
            on_stack[w] = false;
            comp[w] = comps;
            if (w == v) break;
          }
          ++comps;
        }
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    for (const Edge& e : edges[r]) {
      if (comp[e.to] == comp[r] && (e.grows || e.to == static_cast<int32_t>(r))) {
        // A tail self-reference with nothing consumed (a ::= b a, b nullable) is harmless for
        // the matcher but still a loop matching nothing; only growing cycles are refused.
        if (!e.grows) continue;
        const size_t owner = grammar.rules[r].generated ? RuleOwner(grammar, offsets, r) : r;
        return ErrorAt(
            text, offsets[r],
            absl::StrCat("rule '", grammar.rules[owner].name, "' is left-recursive (it can reach '",
                         grammar.rules[e.to].name, "' again before matching any character)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::gbnf_internal
