#include "model/grammar/gbnf.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/grammar/escapes.h"
#include "model/grammar/gbnf_checks.h"
#include "model/grammar/string_view_util.h"
#include "model/tokenizer/utf8.h"

namespace tandem {
namespace {

using grammar_internal::Av;
using grammar_internal::ControlEscape;

constexpr size_t kMaxTextBytes = 1 << 20;
constexpr int kMaxNesting = 200;
constexpr int kMaxRepetition = 10000;
constexpr size_t kMaxElements = 1 << 20;
constexpr uint32_t kMaxCodepoint = 0x10FFFF;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<GbnfGrammar> Parse(std::string_view root_rule) {
    if (text_.size() > kMaxTextBytes) {
      return absl::InvalidArgumentError(absl::StrCat("gbnf: the grammar is ", text_.size(),
                                                     " bytes (at most ", kMaxTextBytes, ")"));
    }
    SkipSpace();
    while (pos_ < text_.size()) {
      absl::Status s = ParseRule();
      if (!s.ok()) return s;
      SkipSpace();
    }
    // Resolve references.
    for (const Ref& ref : refs_) {
      GbnfElement& e = *ElementAt(ref.rule, ref.alt, ref.elem);
      auto it = names_.find(ref.name);
      if (it == names_.end() || !defined_[it->second]) {
        return ErrorAt(ref.offset, absl::StrCat("undefined rule '", ref.name, "'"));
      }
      e.rule = it->second;
    }
    for (size_t r = 0; r < grammar_.rules.size(); ++r) {
      if (!defined_[r]) {
        // Only a referenced-but-undefined name can get here; refs_ caught it above.
        return absl::InvalidArgumentError(
            absl::StrCat("gbnf: undefined rule '", grammar_.rules[r].name, "'"));
      }
    }
    auto root = names_.find(std::string(root_rule));
    if (root == names_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gbnf: the grammar has no rule '", Av(root_rule), "' (the start rule)"));
    }
    grammar_.root = root->second;
    RenameGeneratedCollisions();
    SortByDefinition();
    absl::Status s = gbnf_internal::CheckProductive(grammar_, rule_offset_, text_);
    if (!s.ok()) return s;
    s = gbnf_internal::CheckLeftRecursion(grammar_, rule_offset_, text_);
    if (!s.ok()) return s;
    return std::move(grammar_);
  }

 private:
  struct Ref {
    int32_t rule, alt, elem;
    std::string name;
    size_t offset;
  };

  GbnfElement* ElementAt(int32_t rule, int32_t alt, int32_t elem) {
    return &grammar_.rules[rule].alternatives[alt][elem];
  }

  absl::Status ErrorAt(size_t offset, std::string_view message) const {
    return gbnf_internal::ErrorAt(text_, offset, message);
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  void SkipSpace() {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // Whether a "name ::=" starts at pos_ (after spaces).
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && IsNameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size()) {
      const char c = text_[p];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++p;
      } else if (c == '#') {
        while (p < text_.size() && text_[p] != '\n') ++p;
      } else {
        break;
      }
    }
    return text_.substr(p, 3) == "::=";
  }

  int32_t RuleId(std::string_view name) {
    auto it = names_.find(std::string(name));
    if (it != names_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(grammar_.rules.size());
    grammar_.rules.push_back(GbnfRule{std::string(name), {}, false});
    defined_.push_back(false);
    dead_.push_back(false);
    rule_offset_.push_back(0);
    names_.emplace(std::string(name), id);
    return id;
  }

  int32_t NewGeneratedRule(int32_t parent) {
    const int32_t id = static_cast<int32_t>(grammar_.rules.size());
    std::string name = absl::StrCat(grammar_.rules[parent].name, "-", ++generated_count_[parent]);
    grammar_.rules.push_back(GbnfRule{std::move(name), {}, true});
    defined_.push_back(true);
    dead_.push_back(false);
    rule_offset_.push_back(rule_offset_[parent]);
    return id;
  }

  absl::Status ParseRule() {
    const size_t start = pos_;
    std::string_view name = ParseName();
    if (name.empty()) {
      return ErrorAt(pos_,
                     absl::StrCat("expected a rule name, found '", std::string(1, Peek()), "'"));
    }
    SkipSpace();
    if (text_.substr(pos_, 3) != "::=") {
      return ErrorAt(pos_, absl::StrCat("expected '::=' after rule name '", Av(name), "'"));
    }
    pos_ += 3;
    const int32_t id = RuleId(name);
    if (defined_[id]) {
      return ErrorAt(start, absl::StrCat("rule '", Av(name), "' is defined twice"));
    }
    defined_[id] = true;
    rule_offset_[id] = start;
    current_rule_ = id;
    absl::Status s = ParseAlternatives(id, /*depth=*/0);
    if (s.ok()) CollapseRepetition(id);
    return s;
  }

  // Parses alternatives into rule `id` until ')' (nested) or the next rule / end (top level).
  absl::Status ParseAlternatives(int32_t id, int depth) {
    if (depth > kMaxNesting) {
      return ErrorAt(pos_, absl::StrCat("groups nested deeper than ", kMaxNesting));
    }
    grammar_.rules[id].alternatives.emplace_back();
    while (true) {
      SkipSpace();
      if (AtEnd()) break;
      const char c = Peek();
      if (c == '|') {
        ++pos_;
        grammar_.rules[id].alternatives.emplace_back();
        continue;
      }
      if (c == ')') {
        if (depth == 0) return ErrorAt(pos_, "unmatched ')'");
        break;
      }
      if (depth == 0 && AtRuleStart()) break;
      absl::Status s = ParseItem(id, depth);
      if (!s.ok()) return s;
    }
    if (depth > 0 && AtEnd()) return ErrorAt(pos_, "missing ')'");
    return absl::OkStatus();
  }

  absl::StatusOr<uint32_t> ParseChar(bool in_class) {
    const size_t start = pos_;
    if (AtEnd()) return ErrorAt(pos_, "unexpected end of grammar");
    const char c = Peek();
    if (c == '\\') {
      ++pos_;
      if (AtEnd()) return ErrorAt(start, "unfinished escape");
      const char e = Peek();
      ++pos_;
      if (const std::optional<uint32_t> control = ControlEscape(e)) return *control;
      int digits = 0;
      switch (e) {
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '\'':
        case '.':
        case '(':
        case ')':
        case '|':
        case '*':
        case '+':
        case '?':
        case '{':
        case '}':
          return static_cast<uint32_t>(static_cast<unsigned char>(e));
        case 'x':
          digits = 2;
          break;
        case 'u':
          digits = 4;
          break;
        case 'U':
          digits = 8;
          break;
        default:
          return ErrorAt(start, absl::StrCat("unknown escape '\\", std::string(1, e), "'"));
      }
      uint64_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const int h = HexValue(Peek());
        if (h < 0) {
          return ErrorAt(pos_, absl::StrCat("expected ", digits, " hex digits after '\\",
                                            std::string(1, e), "'"));
        }
        v = v * 16 + h;
        ++pos_;
      }
      if (v > kMaxCodepoint) {
        return ErrorAt(start, absl::StrFormat("code point U+%X is beyond U+10FFFF", v));
      }
      if (!in_class && v >= 0xD800 && v <= 0xDFFF) {
        return ErrorAt(start, absl::StrFormat("U+%04X is a surrogate, not a character", v));
      }
      return static_cast<uint32_t>(v);
    }
    if (static_cast<unsigned char>(c) < 0x80) {
      ++pos_;
      return static_cast<uint32_t>(static_cast<unsigned char>(c));
    }
    const Utf8Step step = ScanUtf8(Av(text_.substr(pos_)));
    if (step.status != Utf8Status::kComplete) return ErrorAt(pos_, "invalid UTF-8");
    pos_ += step.length;
    return static_cast<uint32_t>(step.codepoint);
  }

  void Append(int32_t rule, GbnfElement e) {
    ++element_count_;
    grammar_.rules[rule].alternatives.back().push_back(std::move(e));
  }

  static GbnfElement Char(uint32_t cp) {
    GbnfElement e;
    e.ranges.push_back({cp, cp});
    return e;
  }

  absl::Status ParseItem(int32_t id, int depth) {
    const size_t item_start = grammar_.rules[id].alternatives.back().size();
    const size_t start = pos_;
    int32_t group_rule = -1;  // the item is a group of several elements: its rule
    const char c = Peek();
    if (c == '"') {
      ++pos_;
      while (true) {
        if (AtEnd() || Peek() == '\n') return ErrorAt(start, "unterminated literal");
        if (Peek() == '"') {
          ++pos_;
          break;
        }
        absl::StatusOr<uint32_t> cp = ParseChar(false);
        if (!cp.ok()) return cp.status();
        Append(id, Char(*cp));
      }
    } else if (c == '[') {
      ++pos_;
      GbnfElement e;
      if (Peek() == '^') {
        e.negated = true;
        ++pos_;
      }
      while (true) {
        if (AtEnd()) return ErrorAt(start, "unterminated character class");
        if (Peek() == ']') {
          ++pos_;
          break;
        }
        absl::StatusOr<uint32_t> lo = ParseChar(true);
        if (!lo.ok()) return lo.status();
        uint32_t hi = *lo;
        if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
          ++pos_;
          const size_t hi_at = pos_;
          absl::StatusOr<uint32_t> h = ParseChar(true);
          if (!h.ok()) return h.status();
          hi = *h;
          if (hi < *lo) {
            return ErrorAt(hi_at,
                           absl::StrFormat("range end U+%04X is below its start U+%04X", hi, *lo));
          }
        }
        e.ranges.push_back({*lo, hi});
      }
      Append(id, std::move(e));
    } else if (c == '.') {
      ++pos_;
      GbnfElement e;
      e.negated = true;
      Append(id, std::move(e));
    } else if (c == '(') {
      ++pos_;
      const int32_t sub = NewGeneratedRule(current_rule_);
      absl::Status s = ParseAlternatives(sub, depth + 1);
      if (!s.ok()) return s;
      ++pos_;  // ')'
      std::vector<GbnfSequence>& alts = grammar_.rules[sub].alternatives;
      if (alts.size() == 1 && alts[0].size() == 1) {
        // A group of one element is that element.
        GbnfElement e = std::move(alts[0][0]);
        for (Ref& ref : refs_) {
          if (ref.rule == sub) {
            ref.rule = id;
            ref.alt = static_cast<int32_t>(grammar_.rules[id].alternatives.size() - 1);
            ref.elem = static_cast<int32_t>(grammar_.rules[id].alternatives.back().size());
          }
        }
        alts.clear();
        dead_[sub] = true;
        Append(id, std::move(e));
      } else {
        GbnfElement e;
        e.kind = GbnfElement::Kind::kRuleRef;
        e.rule = sub;
        Append(id, std::move(e));
        group_rule = sub;
      }
    } else if (IsNameChar(c)) {
      std::string_view name = ParseName();
      const int32_t ref_id = RuleId(name);
      GbnfElement e;
      e.kind = GbnfElement::Kind::kRuleRef;
      e.rule = ref_id;
      refs_.push_back(Ref{id, static_cast<int32_t>(grammar_.rules[id].alternatives.size() - 1),
                          static_cast<int32_t>(grammar_.rules[id].alternatives.back().size()),
                          std::string(name), start});
      Append(id, std::move(e));
    } else {
      return ErrorAt(pos_, absl::StrCat("unexpected '", std::string(1, c), "'"));
    }
    if (element_count_ > kMaxElements) {
      return ErrorAt(start, absl::StrCat("the grammar has more than ", kMaxElements, " elements"));
    }
    // Quantifier (no space before it, as in llama.cpp; spaces are allowed too).
    size_t save = pos_;
    SkipSpace();
    const char q = Peek();
    int min = -1, max = -1;  // max -1: unbounded
    if (q == '*') {
      min = 0;
      ++pos_;
    } else if (q == '+') {
      min = 1;
      ++pos_;
    } else if (q == '?') {
      min = 0;
      max = 1;
      ++pos_;
    } else if (q == '{') {
      const size_t brace = pos_;
      ++pos_;
      SkipSpace();
      auto number = [&]() -> int {
        if (!(Peek() >= '0' && Peek() <= '9')) return -1;
        int64_t v = 0;
        while (Peek() >= '0' && Peek() <= '9') {
          v = v * 10 + (Peek() - '0');
          if (v > kMaxRepetition) v = kMaxRepetition + 1;
          ++pos_;
        }
        return static_cast<int>(v);
      };
      min = number();
      if (min < 0) return ErrorAt(pos_, "expected a number after '{'");
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
        if (Peek() == '}') {
          max = -1;
        } else {
          max = number();
          if (max < 0) return ErrorAt(pos_, "expected a number or '}' after ','");
        }
      } else {
        max = min;
      }
      SkipSpace();
      if (Peek() != '}') return ErrorAt(pos_, "expected '}'");
      ++pos_;
      if (min > kMaxRepetition || max > kMaxRepetition) {
        return ErrorAt(brace, absl::StrCat("repetition count above ", kMaxRepetition));
      }
      if (max >= 0 && max < min) {
        return ErrorAt(brace, absl::StrCat("repetition {", min, ",", max, "} has max < min"));
      }
    } else {
      pos_ = save;
      return absl::OkStatus();
    }
    if (item_start == grammar_.rules[id].alternatives.back().size()) {
      // An empty literal repeated is still empty.
      return absl::OkStatus();
    }
    return Repeat(id, item_start, min, max, start, group_rule);
  }

  // Replaces the last item (elements from item_start on) of rule id's current alternative by
  // its repetition {min,max} (max -1: unbounded): `?` an optional rule, `*` a right-recursive
  // rule, `+` a copy and `*`, {1} a copy; any other count a repetition rule (GbnfRule::
  // repeat_min/max), whose counter lives in the matcher's stacks, so {0,200} costs one copy.
  absl::Status Repeat(int32_t id, size_t item_start, int min, int max, size_t offset,
                      int32_t group_rule) {
    GbnfSequence& seq0 = grammar_.rules[id].alternatives.back();
    GbnfSequence item(seq0.begin() + item_start, seq0.end());
    seq0.resize(item_start);
    const bool counted = !((min <= 1 && max < 0) || (min == 0 && max == 1) || max == min);
    const int copies = counted ? 1 : (max == min ? min : min + 1);
    element_count_ += item.size() * static_cast<size_t>(std::max(copies, 1));
    if (element_count_ > kMaxElements) {
      return ErrorAt(offset, absl::StrCat("the grammar has more than ", kMaxElements,
                                          " elements after expanding repetitions"));
    }
    // References inside `item` still waiting for their names move with each copy.
    const int32_t alt_index = static_cast<int32_t>(grammar_.rules[id].alternatives.size() - 1);
    std::vector<Ref> kept, moved;
    for (Ref& ref : refs_) {
      if (ref.rule == id && ref.alt == alt_index && ref.elem >= static_cast<int32_t>(item_start)) {
        moved.push_back(std::move(ref));
      } else {
        kept.push_back(std::move(ref));
      }
    }
    refs_ = std::move(kept);
    auto emit_copy = [&](int32_t rule, int32_t alt) {
      GbnfSequence& s = grammar_.rules[rule].alternatives[alt];
      const size_t base = s.size();
      s.insert(s.end(), item.begin(), item.end());
      for (size_t m = 0; m < moved.size(); ++m) {
        Ref r = moved[m];
        r.rule = rule;
        r.alt = alt;
        r.elem = static_cast<int32_t>(base + (moved[m].elem - item_start));
        refs_.push_back(std::move(r));
      }
    };
    auto ref_to = [](int32_t rule) {
      GbnfElement e;
      e.kind = GbnfElement::Kind::kRuleRef;
      e.rule = rule;
      return e;
    };
    if (counted) {
      const int32_t rep = NewGeneratedRule(current_rule_);
      GbnfRule& r = grammar_.rules[rep];
      r.repeat = true;
      r.repeat_min = min;
      r.repeat_max = max;
      if (group_rule >= 0 && item.size() == 1 && item[0].kind == GbnfElement::Kind::kRuleRef &&
          item[0].rule == group_rule) {
        // (a | b){m,n}: the group's alternatives are the repeated body.
        r.alternatives = std::move(grammar_.rules[group_rule].alternatives);
        grammar_.rules[group_rule].alternatives.clear();
        dead_[group_rule] = true;
        for (Ref& ref : refs_) {
          if (ref.rule == group_rule) ref.rule = rep;
        }
      } else {
        r.alternatives.emplace_back();
        emit_copy(rep, 0);
      }
      grammar_.rules[id].alternatives[alt_index].push_back(ref_to(rep));
      return absl::OkStatus();
    }
    for (int i = 0; i < min; ++i) emit_copy(id, alt_index);
    if (max < 0) {
      // star ::= item star | ""
      const int32_t star = NewGeneratedRule(current_rule_);
      grammar_.rules[star].alternatives.emplace_back();
      emit_copy(star, 0);
      grammar_.rules[star].alternatives[0].push_back(ref_to(star));
      grammar_.rules[star].alternatives.emplace_back();
      grammar_.rules[id].alternatives[alt_index].push_back(ref_to(star));
    } else if (max > min) {
      // opt ::= item | ""
      const int32_t opt = NewGeneratedRule(current_rule_);
      grammar_.rules[opt].alternatives.emplace_back();
      emit_copy(opt, 0);
      grammar_.rules[opt].alternatives.emplace_back();
      grammar_.rules[id].alternatives[alt_index].push_back(ref_to(opt));
    }
    return absl::OkStatus();
  }

  // `name ::= X{m,n}` alone: the rule is that repetition (so ToString's "(...){m,n}" parses
  // back to the same rule).
  void CollapseRepetition(int32_t id) {
    GbnfRule& r = grammar_.rules[id];
    if (r.alternatives.size() != 1 || r.alternatives[0].size() != 1) return;
    const GbnfElement& e = r.alternatives[0][0];
    if (e.kind != GbnfElement::Kind::kRuleRef || e.rule <= id) return;
    GbnfRule& g = grammar_.rules[e.rule];
    if (!g.generated || !g.repeat || rule_offset_[e.rule] != rule_offset_[id]) return;
    const int32_t gid = e.rule;
    for (const Ref& ref : refs_) {
      if (ref.rule == id) return;  // the element itself is a pending name: not a generated rule
    }
    r.alternatives = std::move(g.alternatives);
    r.repeat = true;
    r.repeat_min = g.repeat_min;
    r.repeat_max = g.repeat_max;
    g.alternatives.clear();
    g.repeat = false;
    dead_[gid] = true;
    for (Ref& ref : refs_) {
      if (ref.rule == gid) ref.rule = id;
    }
  }

  void RenameGeneratedCollisions() {
    absl::flat_hash_set<std::string> used;
    for (const GbnfRule& r : grammar_.rules) {
      if (!r.generated) used.insert(r.name);
    }
    for (GbnfRule& r : grammar_.rules) {
      if (!r.generated) continue;
      std::string name = r.name;
      for (int n = 2; used.contains(name); ++n) name = absl::StrCat(r.name, "-", n);
      used.insert(name);
      r.name = std::move(name);
    }
  }

  // Rules in the order of their definitions (generated ones after their rule), so ToString's
  // text parses back to the same order and prints the same.
  void SortByDefinition() {
    std::vector<int32_t> order;
    for (size_t i = 0; i < grammar_.rules.size(); ++i) {
      if (!dead_[i]) order.push_back(static_cast<int32_t>(i));
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return rule_offset_[a] < rule_offset_[b]; });
    const size_t n = order.size();
    std::vector<int32_t> new_index(grammar_.rules.size(), -1);
    for (size_t i = 0; i < n; ++i) new_index[order[i]] = static_cast<int32_t>(i);
    std::vector<GbnfRule> rules(n);
    std::vector<size_t> offsets(n);
    for (size_t i = 0; i < n; ++i) {
      rules[i] = std::move(grammar_.rules[order[i]]);
      offsets[i] = rule_offset_[order[i]];
    }
    for (GbnfRule& r : rules) {
      for (GbnfSequence& seq : r.alternatives) {
        for (GbnfElement& e : seq) {
          if (e.kind == GbnfElement::Kind::kRuleRef) e.rule = new_index[e.rule];
        }
      }
    }
    grammar_.rules = std::move(rules);
    rule_offset_ = std::move(offsets);
    grammar_.root = new_index[grammar_.root];
  }

  std::string_view text_;
  size_t pos_ = 0;
  GbnfGrammar grammar_;
  std::vector<bool> defined_;
  std::vector<bool> dead_;  // absorbed by another rule; dropped after parsing
  std::vector<size_t> rule_offset_;
  absl::flat_hash_map<std::string, int32_t> names_;
  absl::flat_hash_map<int32_t, int> generated_count_;
  std::vector<Ref> refs_;
  int32_t current_rule_ = -1;
  size_t element_count_ = 0;
};

void AppendEscaped(uint32_t cp, bool in_class, std::string* out) {
  switch (cp) {
    case '\n':
      *out += "\\n";
      return;
    case '\r':
      *out += "\\r";
      return;
    case '\t':
      *out += "\\t";
      return;
    case '\\':
      *out += "\\\\";
      return;
    case '"':
      *out += "\\\"";
      return;
    default:
      break;
  }
  if (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^')) {
    *out += '\\';
    *out += static_cast<char>(cp);
    return;
  }
  if (cp < 0x20 || cp == 0x7F) {
    absl::StrAppendFormat(out, "\\x%02X", cp);
  } else if (cp >= 0xD800 && cp <= 0xDFFF) {
    absl::StrAppendFormat(out, "\\u%04X", cp);
  } else if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else {
    AppendUtf8(static_cast<char32_t>(cp), out);
  }
}

}  // namespace

int32_t GbnfGrammar::FindRule(std::string_view name) const {
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

std::string GbnfGrammar::ToString() const {
  std::string out;
  for (const GbnfRule& rule : rules) {
    absl::StrAppend(&out, rule.name, " ::=");
    if (rule.repeat) out += " (";
    for (size_t a = 0; a < rule.alternatives.size(); ++a) {
      if (a > 0) out += " |";
      const GbnfSequence& seq = rule.alternatives[a];
      bool in_literal = false;
      for (const GbnfElement& e : seq) {
        const bool single = e.kind == GbnfElement::Kind::kChars && !e.negated &&
                            e.ranges.size() == 1 && e.ranges[0].lo == e.ranges[0].hi &&
                            !(e.ranges[0].lo >= 0xD800 && e.ranges[0].lo <= 0xDFFF);
        if (single) {
          if (!in_literal) {
            out += " \"";
            in_literal = true;
          }
          AppendEscaped(e.ranges[0].lo, false, &out);
          continue;
        }
        if (in_literal) {
          out += '"';
          in_literal = false;
        }
        if (e.kind == GbnfElement::Kind::kRuleRef) {
          absl::StrAppend(&out, " ", rules[e.rule].name);
        } else if (e.negated && e.ranges.empty()) {
          out += " .";
        } else {
          out += e.negated ? " [^" : " [";
          for (const GbnfCharRange& r : e.ranges) {
            AppendEscaped(r.lo, true, &out);
            if (r.hi != r.lo) {
              out += '-';
              AppendEscaped(r.hi, true, &out);
            }
          }
          out += ']';
        }
      }
      if (in_literal) out += '"';
      if (seq.empty()) out += " \"\"";
    }
    if (rule.repeat) {
      out += rule.repeat_max < 0 ? absl::StrCat(" ){", rule.repeat_min, ",}")
                                 : absl::StrCat(" ){", rule.repeat_min, ",", rule.repeat_max, "}");
    }
    out += '\n';
  }
  return out;
}

absl::StatusOr<GbnfGrammar> ParseGbnf(std::string_view text, std::string_view root_rule) {
  return Parser(text).Parse(root_rule);
}

std::string GbnfLiteral(std::string_view utf8) {
  std::string out = "\"";
  size_t i = 0;
  while (i < utf8.size()) {
    const Utf8Step step = ScanUtf8(Av(utf8.substr(i)));
    if (step.status == Utf8Status::kComplete) {
      AppendEscaped(step.codepoint, false, &out);
      i += step.length;
    } else {
      absl::StrAppendFormat(&out, "\\x%02X", static_cast<unsigned char>(utf8[i]));
      ++i;
    }
  }
  out += '"';
  return out;
}

bool IsGbnfRuleName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

}  // namespace tandem
