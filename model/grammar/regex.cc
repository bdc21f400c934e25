#include "model/grammar/regex.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/grammar/escapes.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/string_view_util.h"
#include "model/tokenizer/utf8.h"

namespace tandem {
namespace {

constexpr int kMaxCount = 1000;
constexpr int kMaxDepth = 200;
constexpr uint32_t kMaxCp = 0x10FFFF;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive
using grammar_internal::ControlEscape;

Ranges Merge(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, x.second);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

Ranges Complement(const Ranges& in) {
  Ranges m = Merge(in), out;
  uint32_t next = 0;
  for (const auto& x : m) {
    if (x.first > next) out.emplace_back(next, x.first - 1);
    next = x.second + 1;
  }
  if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
  return out;
}

Ranges Subtract(const Ranges& a, const Ranges& b) {
  Ranges cb = Complement(b), out;
  Ranges ma = Merge(a);
  for (const auto& x : ma) {
    for (const auto& y : cb) {
      const uint32_t lo = std::max(x.first, y.first), hi = std::min(x.second, y.second);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  }
  return Merge(out);
}

bool Contains(const Ranges& r, uint32_t cp) {
  for (const auto& x : r) {
    if (cp >= x.first && cp <= x.second) return true;
  }
  return false;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};
// `.`: any code point but the line terminators ECMAScript excludes.
const Ranges kDotExcluded = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

void AppendClassChar(uint32_t cp, std::string* out) {
  if (cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^' || cp == '"') {
    *out += '\\';
    *out += static_cast<char>(cp);
  } else if (cp < 0x20 || cp == 0x7F) {
    absl::StrAppendFormat(out, "\\x%02X", cp);
  } else if (cp >= 0xD800 && cp <= 0xDFFF) {
    absl::StrAppendFormat(out, "\\u%04X", cp);
  } else if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else {
    AppendUtf8(static_cast<char32_t>(cp), out);
  }
}

class RegexParser {
 public:
  RegexParser(absl::string_view re, const RegexGbnfOptions& opt) : re_(re), opt_(opt) {}

  absl::StatusOr<std::string> Run(absl::string_view root) {
    bool anchored_start = false, anchored_end = false;
    size_t end = re_.size();
    if (!re_.empty() && re_[0] == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    if (end > pos_ && re_[end - 1] == '$') {
      // A '$' that is escaped (an odd number of backslashes before it) is a literal.
      size_t backslashes = 0;
      for (size_t i = end - 1; i > pos_ && re_[i - 1] == '\\'; --i) ++backslashes;
      if (backslashes % 2 == 0) {
        anchored_end = true;
        end_ = end - 1;
      }
    }
    if (end_ == absl::string_view::npos) end_ = end;
    absl::StatusOr<std::string> body = ParseAlt(0);
    if (!body.ok()) return body.status();
    if (pos_ < end_) {
      if (re_[pos_] == ')') return Error("unmatched ')'");
      return Error("unexpected character");
    }
    std::string any;
    if (opt_.search && (!anchored_start || !anchored_end)) {
      any = absl::StrCat("(", ClassGbnf(Complement({})), ")*");
    }
    std::string out = absl::StrCat(root, " ::= ");
    if (opt_.search && !anchored_start) absl::StrAppend(&out, any, " ");
    absl::StrAppend(&out, "(", body->empty() ? "\"\"" : *body, ")");
    if (opt_.search && !anchored_end) absl::StrAppend(&out, " ", any);
    out += '\n';
    return out;
  }

 private:
  absl::Status Error(absl::string_view what) const { return ErrorAt(pos_, what); }
  absl::Status ErrorAt(size_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: ", what, " at offset ", at));
  }
  bool AtEnd() const { return pos_ >= end_; }
  char Peek(size_t k = 0) const { return pos_ + k < end_ ? re_[pos_ + k] : '\0'; }

  absl::StatusOr<std::string> ParseAlt(int depth) {
    if (depth > kMaxDepth) return Error(absl::StrCat("groups nested deeper than ", kMaxDepth));
    std::vector<std::string> alts;
    while (true) {
      absl::StatusOr<std::string> seq = ParseConcat(depth);
      if (!seq.ok()) return seq.status();
      alts.push_back(seq->empty() ? "\"\"" : *std::move(seq));
      if (!AtEnd() && Peek() == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    if (alts.size() == 1) return alts[0] == "\"\"" ? std::string() : alts[0];
    std::string out;
    for (size_t i = 0; i < alts.size(); ++i) absl::StrAppend(&out, i ? " | " : "", alts[i]);
    return out;
  }

  absl::StatusOr<std::string> ParseConcat(int depth) {
    std::string out;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      const size_t atom_at = pos_;
      absl::StatusOr<std::string> atom = ParseAtom(depth);
      if (!atom.ok()) return atom.status();
      absl::StatusOr<std::string> q = ParseQuantifier(atom_at);
      if (!q.ok()) return q.status();
      if (!out.empty()) out += ' ';
      absl::StrAppend(&out, "(", *atom, ")", *q);
    }
    return out;
  }

  // "" when none follows.
  absl::StatusOr<std::string> ParseQuantifier(size_t atom_at) {
    if (AtEnd()) return std::string();
    const char c = Peek();
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = std::string(1, c);
    } else if (c == '{') {
      size_t p = pos_ + 1;
      auto number = [&](int* v) {
        const size_t s = p;
        int64_t x = 0;
        while (p < end_ && re_[p] >= '0' && re_[p] <= '9') {
          x = std::min<int64_t>(x * 10 + (re_[p] - '0'), int64_t{kMaxCount} + 1);
          ++p;
        }
        *v = static_cast<int>(x);
        return p > s;
      };
      int lo = 0, hi = -1;
      if (!number(&lo)) return std::string();  // a literal '{'
      if (p < end_ && re_[p] == ',') {
        ++p;
        if (!number(&hi)) hi = -1;
      } else {
        hi = lo;
      }
      if (p >= end_ || re_[p] != '}') return std::string();  // a literal '{'
      if (lo > kMaxCount || hi > kMaxCount) {
        return ErrorAt(pos_, absl::StrCat("repetition count above ", kMaxCount));
      }
      if (hi >= 0 && hi < lo) return ErrorAt(pos_, "repetition {m,n} with n < m");
      pos_ = p + 1;
      q = hi < 0 ? absl::StrCat("{", lo, ",}") : absl::StrCat("{", lo, ",", hi, "}");
    } else {
      return std::string();
    }
    // Lazy '?' and possessive '+' suffixes match the same strings.
    if (!AtEnd() && (Peek() == '?' || Peek() == '+')) ++pos_;
    if (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
      if (Peek() != '{') return Error("nothing to repeat (a quantifier after a quantifier)");
    }
    (void)atom_at;
    return q;
  }

  absl::StatusOr<std::string> ParseAtom(int depth) {
    const char c = Peek();
    switch (c) {
      case '(': {
        const size_t open = pos_;
        ++pos_;
        if (Peek() == '?') {
          const char k = Peek(1);
          if (k == ':') {
            pos_ += 2;
          } else if (k == '=' || k == '!') {
            return ErrorAt(open, "lookahead is not supported");
          } else if (k == '<' && (Peek(2) == '=' || Peek(2) == '!')) {
            return ErrorAt(open, "lookbehind is not supported");
          } else if (k == '<' || (k == 'P' && Peek(2) == '<')) {
            pos_ += k == 'P' ? 3 : 2;
            while (!AtEnd() && Peek() != '>') ++pos_;
            if (AtEnd()) return ErrorAt(open, "unterminated group name");
            ++pos_;
          } else if (k == 'P' && Peek(2) == '=') {
            return ErrorAt(open, "backreferences are not supported");
          } else if (k == '>') {
            return ErrorAt(open, "atomic groups are not supported");
          } else if (k == '#') {
            return ErrorAt(open, "comments are not supported");
          } else {
            return ErrorAt(open, "inline flags and other (?...) groups are not supported");
          }
        }
        absl::StatusOr<std::string> inner = ParseAlt(depth + 1);
        if (!inner.ok()) return inner.status();
        if (AtEnd() || Peek() != ')') return ErrorAt(open, "missing ')'");
        ++pos_;
        return inner->empty() ? std::string("\"\"") : *std::move(inner);
      }
      case '[':
        return ParseClass();
      case '.':
        ++pos_;
        return ClassGbnf(Subtract(Complement({}), kDotExcluded));
      case '^':
        return Error("'^' is supported only at the start of the pattern");
      case '$':
        return Error("'$' is supported only at the end of the pattern");
      case '*':
      case '+':
      case '?':
        return Error("nothing to repeat");
      case '{': {
        ++pos_;
        return CharGbnf('{');
      }
      case '\\': {
        Ranges r;
        absl::StatusOr<uint32_t> cp = ParseEscape(&r, /*in_class=*/false);
        if (!cp.ok()) return cp.status();
        if (!r.empty()) return ClassGbnf(r);
        return CharGbnf(*cp);
      }
      default: {
        absl::StatusOr<uint32_t> cp = ParseLiteral();
        if (!cp.ok()) return cp.status();
        return CharGbnf(*cp);
      }
    }
  }

  absl::StatusOr<uint32_t> ParseLiteral() {
    const unsigned char c = static_cast<unsigned char>(Peek());
    if (c < 0x80) {
      ++pos_;
      return uint32_t{c};
    }
    const Utf8Step step = ScanUtf8(re_.substr(pos_, end_ - pos_));
    if (step.status != Utf8Status::kComplete) return Error("invalid UTF-8");
    pos_ += step.length;
    return static_cast<uint32_t>(step.codepoint);
  }

  // At a backslash. A class escape (\d ...) fills *ranges and returns 0.
  absl::StatusOr<uint32_t> ParseEscape(Ranges* ranges, bool in_class) {
    const size_t at = pos_;
    ++pos_;
    if (AtEnd()) return ErrorAt(at, "trailing backslash");
    const char e = Peek();
    ++pos_;
    auto hex = [&](int digits) -> absl::StatusOr<uint32_t> {
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const char h = Peek();
        int d = (h >= '0' && h <= '9')   ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (d < 0) return ErrorAt(at, absl::StrCat("expected ", digits, " hex digits"));
        v = v * 16 + d;
        ++pos_;
      }
      return v;
    };
    if (const std::optional<uint32_t> control = ControlEscape(e)) return *control;
    switch (e) {
      case 'd':
        *ranges = kDigit;
        return 0u;
      case 'D':
        *ranges = Complement(kDigit);
        return 0u;
      case 'w':
        *ranges = kWord;
        return 0u;
      case 'W':
        *ranges = Complement(kWord);
        return 0u;
      case 's':
        *ranges = kSpace;
        return 0u;
      case 'S':
        *ranges = Complement(kSpace);
        return 0u;
      case 'x':
        return hex(2);
      case 'u': {
        if (Peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (!AtEnd() && Peek() != '}') {
            absl::StatusOr<uint32_t> d = hex(1);
            if (!d.ok()) return d.status();
            v = v * 16 + *d;
            if (++n > 6 || v > kMaxCp) return ErrorAt(at, "code point beyond U+10FFFF");
          }
          if (AtEnd() || n == 0) return ErrorAt(at, "bad \\u{...} escape");
          ++pos_;
          return v;
        }
        return hex(4);
      }
      case 'b':
        if (in_class) return uint32_t{'\b'};
        return ErrorAt(at, "word boundaries (\\b) are not supported");
      case 'B':
        return ErrorAt(at, "word boundaries (\\B) are not supported");
      case 'A':
      case 'z':
      case 'Z':
      case 'G':
        return ErrorAt(at, absl::StrCat("anchor \\", std::string(1, e), " is not supported"));
      case 'k':
        return ErrorAt(at, "backreferences are not supported");
      case 'p':
      case 'P':
        return ErrorAt(at, "Unicode property escapes (\\p{...}) are not supported");
      case 'c':
        return ErrorAt(at, "control escapes (\\cX) are not supported");
      default:
        break;
    }
    if (e >= '1' && e <= '9') return ErrorAt(at, "backreferences are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
      return ErrorAt(at, absl::StrCat("unknown escape \\", std::string(1, e)));
    }
    --pos_;
    return ParseLiteral();
  }

  absl::StatusOr<std::string> ParseClass() {
    const size_t open = pos_;
    ++pos_;
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges set;
    bool first = true;
    while (true) {
      if (AtEnd()) return ErrorAt(open, "unterminated character class");
      if (Peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      Ranges esc;
      uint32_t lo;
      if (Peek() == '\\') {
        absl::StatusOr<uint32_t> cp = ParseEscape(&esc, /*in_class=*/true);
        if (!cp.ok()) return cp.status();
        lo = *cp;
      } else {
        if (Peek() == '[' && (Peek(1) == ':' || Peek(1) == '=' || Peek(1) == '.')) {
          return Error("POSIX classes ([:alpha:]) are not supported");
        }
        absl::StatusOr<uint32_t> cp = ParseLiteral();
        if (!cp.ok()) return cp.status();
        lo = *cp;
      }
      if (!esc.empty()) {
        set.insert(set.end(), esc.begin(), esc.end());
        continue;
      }
      uint32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < end_) {
        ++pos_;
        Ranges esc2;
        if (Peek() == '\\') {
          absl::StatusOr<uint32_t> cp = ParseEscape(&esc2, true);
          if (!cp.ok()) return cp.status();
          if (!esc2.empty()) return Error("a class escape cannot end a range");
          hi = *cp;
        } else {
          absl::StatusOr<uint32_t> cp = ParseLiteral();
          if (!cp.ok()) return cp.status();
          hi = *cp;
        }
        if (hi < lo) return Error("range out of order in character class");
      }
      set.emplace_back(lo, hi);
    }
    return ClassGbnf(negated ? Complement(set) : Merge(set));
  }

  std::string CharGbnf(uint32_t cp) { return ClassGbnf({{cp, cp}}); }

  // A GBNF expression for one character of `r` (JSON-escaped in json_string_content mode).
  std::string ClassGbnf(Ranges r) {
    r = Merge(std::move(r));
    std::vector<std::string> alts;
    if (opt_.json_string_content) {
      const Ranges unsafe = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      const bool quote = Contains(r, '"'), backslash = Contains(r, '\\');
      const bool nl = Contains(r, '\n'), cr = Contains(r, '\r'), tab = Contains(r, '\t');
      r = Subtract(r, unsafe);
      if (quote) alts.push_back("\"\\\\\\\"\"");  // GBNF "\\\"" : backslash, quote
      if (backslash) alts.push_back("\"\\\\\\\\\"");
      if (nl) alts.push_back("\"\\\\n\"");
      if (cr) alts.push_back("\"\\\\r\"");
      if (tab) alts.push_back("\"\\\\t\"");
    }
    // Drop surrogates (not characters).
    r = Subtract(r, {{0xD800, 0xDFFF}});
    if (!r.empty()) {
      std::string c;
      if (r.size() == 1 && r[0].first == r[0].second) {
        std::string utf8;
        AppendUtf8(static_cast<char32_t>(r[0].first), &utf8);
        c = GbnfLiteral(utf8);
      } else {
        c.push_back('[');  // not `c = "["`: GCC 12's -Wrestrict misfires on it under ASan
        for (const auto& x : r) {
          AppendClassChar(x.first, &c);
          if (x.second != x.first) {
            c += '-';
            AppendClassChar(x.second, &c);
          }
        }
        c += ']';
      }
      alts.insert(alts.begin(), std::move(c));
    }
    if (alts.empty()) return "[^\\x00-\\U0010FFFF]";  // matches nothing
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) absl::StrAppend(&out, i ? " | " : "", alts[i]);
    out += ')';
    return out;
  }

  absl::string_view re_;
  RegexGbnfOptions opt_;
  size_t pos_ = 0;
  size_t end_ = absl::string_view::npos;
};

}  // namespace

absl::StatusOr<std::string> RegexToGbnf(std::string_view regex, std::string_view root_rule,
                                        const RegexGbnfOptions& options) {
  if (!IsGbnfRuleName(root_rule)) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: bad rule name '", grammar_internal::Av(root_rule), "'"));
  }
  if (regex.size() > (1 << 16)) {
    return absl::InvalidArgumentError("regex: longer than 65536 bytes");
  }
  return RegexParser(grammar_internal::Av(regex), options).Run(grammar_internal::Av(root_rule));
}

absl::StatusOr<std::string> RegexToGbnf(std::string_view regex, std::string_view root_rule) {
  return RegexToGbnf(regex, root_rule, RegexGbnfOptions{});
}

}  // namespace tandem
