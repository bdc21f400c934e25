#include "model/chat_template/lexer.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "model/chat_template/pystr.h"

namespace tandem::jinja {
namespace {

// Decodes the code point at s[pos] (one byte for ASCII and bad bytes); sets *len.
char32_t CodePointAt(absl::string_view s, size_t pos, size_t* len) {
  const unsigned char b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  size_t n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
  if (n == 1 || pos + n > s.size()) {
    *len = 1;
    return 0xFFFD;
  }
  const std::u32string cp = DecodeUtf8(s.substr(pos, n));
  *len = n;
  return cp.size() == 1 ? cp[0] : 0xFFFD;
}

// Python's `\s*` from pos.
size_t SkipSpace(absl::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t len;
    if (!IsPySpace(CodePointAt(s, pos, &len))) break;
    pos += len;
  }
  return pos;
}

// Python's str.rstrip() (whitespace).
absl::string_view RStrip(absl::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len;
    if (!IsPySpace(CodePointAt(s, start, &len)) || start + len != end) break;
    end = start;
  }
  return s.substr(0, end);
}

// Python's `\s+` fullmatch of s (non-empty, all whitespace).
bool AllSpace(absl::string_view s) { return !s.empty() && SkipSpace(s, 0) == s.size(); }

int CountNewlines(absl::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal's body.
absl::StatusOr<std::string> Unescape(absl::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 1; k <= digits; ++k) {
          const int h = i + k < body.size() ? HexValue(body[i + k]) : -1;
          if (h < 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                "line ", line, ": truncated \\", std::string(1, e), " escape in a string literal"));
          }
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10FFFF) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line, ": illegal Unicode character in a string literal"));
        }
        AppendUtf8(cp, &out);
        i += digits;
        break;
      }
      case 'N':
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line, ": unsupported \\N{...} escape in a string literal"));
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          AppendUtf8(cp, &out);
        } else {
          // Python keeps unknown escapes as written.
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      const size_t tag = FindTag(pos_);
      if (tag == std::string::npos) {
        Emit(TokenType::kData, src_.substr(pos_));
        break;
      }
      absl::Status st = Tag(tag);
      if (!st.ok()) return st;
    }
    tokens_.push_back(Token{TokenType::kEof, "", 0, 0, line_});
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '%' || src_[i + 1] == '{' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void Emit(TokenType type, absl::string_view text) {
    if (type == TokenType::kData && text.empty()) return;
    tokens_.push_back(Token{type, std::string(text), 0, 0, line_});
    line_ += CountNewlines(text);
  }

  // {% raw %} at `at` (after any whitespace-control sign): the end of its opening tag, or npos.
  size_t MatchRawBegin(size_t after_sign) const {
    size_t p = SkipSpace(src_, after_sign);
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p = SkipSpace(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) return SkipSpace(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  // The text before a tag, with the whitespace control of Jinja2's OptionalLStrip rule.
  void EmitLeadingText(absl::string_view text, char sign, bool lstrip_applies) {
    if (sign == '-') {
      const absl::string_view kept = RStrip(text);
      Emit(TokenType::kData, kept);
      line_ += CountNewlines(text.substr(kept.size()));
      return;
    }
    if (sign != '+' && lstrip_applies) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == absl::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && AllSpace(text.substr(l_pos))) {
        Emit(TokenType::kData, text.substr(0, l_pos));
        return;
      }
    }
    Emit(TokenType::kData, text);
  }

  absl::Status Tag(size_t at) {
    const char kind = src_[at + 1];
    size_t p = at + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    const absl::string_view text = absl::string_view(src_).substr(pos_, at - pos_);
    if (kind == '%') {
      if (const size_t raw_end = MatchRawBegin(p); raw_end != std::string::npos) {
        EmitLeadingText(text, sign, /*lstrip_applies=*/true);
        line_ += CountNewlines(absl::string_view(src_).substr(at, raw_end - at));
        line_starting_ = raw_end > at && src_[raw_end - 1] == '\n';
        return Raw(raw_end);
      }
    }
    EmitLeadingText(text, sign, /*lstrip_applies=*/kind != '{');
    line_starting_ = false;
    if (kind == '#') return Comment(p);
    tokens_.push_back(
        Token{kind == '%' ? TokenType::kBlockBegin : TokenType::kVarBegin, "", 0, 0, line_});
    pos_ = p;
    return Expression(kind == '%');
  }

  absl::Status Comment(size_t p) {
    for (size_t i = p; i < src_.size(); ++i) {
      size_t end = std::string::npos;
      if (src_.compare(i, 3, "+#}") == 0) {
        end = i + 3;
      } else if (src_.compare(i, 3, "-#}") == 0) {
        end = SkipSpace(src_, i + 3);
      } else if (src_.compare(i, 2, "#}") == 0) {
        end = i + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
      }
      if (end == std::string::npos) continue;
      line_ += CountNewlines(absl::string_view(src_).substr(p, end - p));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": missing end of comment tag"));
  }

  absl::Status Raw(size_t p) {
    for (size_t i = p; i + 1 < src_.size(); ++i) {
      if (src_[i] != '{' || src_[i + 1] != '%') continue;
      size_t q = i + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = SkipSpace(src_, q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = SkipSpace(src_, q + 6);
      size_t end;
      if (src_.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (src_.compare(q, 3, "-%}") == 0) {
        end = SkipSpace(src_, q + 3);
      } else if (src_.compare(q, 2, "%}") == 0) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      pos_ = p;
      EmitLeadingText(absl::string_view(src_).substr(p, i - p), sign, /*lstrip_applies=*/true);
      line_ += CountNewlines(absl::string_view(src_).substr(i, end - i));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line_, ": missing end of raw directive"));
  }

  // Tokens of a {% ... %} or {{ ... }} up to and including its end.
  absl::Status Expression(bool block) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) {
        return absl::InvalidArgumentError(absl::StrCat("line ", line_,
                                                       ": unexpected end of template inside a ",
                                                       block ? "{% %}" : "{{ }}", " tag"));
      }
      if (balance.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (src_.compare(pos_, 3, "+%}") == 0) {
            end = pos_ + 3;
          } else if (src_.compare(pos_, 3, "-%}") == 0) {
            end = SkipSpace(src_, pos_ + 3);
          } else if (src_.compare(pos_, 2, "%}") == 0) {
            end = pos_ + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
          }
        } else {
          if (src_.compare(pos_, 3, "-}}") == 0) {
            end = SkipSpace(src_, pos_ + 3);
          } else if (src_.compare(pos_, 2, "}}") == 0) {
            end = pos_ + 2;
          }
        }
        if (end != std::string::npos) {
          tokens_.push_back(
              Token{block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", 0, 0, line_});
          line_ += CountNewlines(absl::string_view(src_).substr(pos_, end - pos_));
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return absl::OkStatus();
        }
      }
      const size_t ws_end = SkipSpace(src_, pos_);
      if (ws_end > pos_) {
        line_ += CountNewlines(absl::string_view(src_).substr(pos_, ws_end - pos_));
        pos_ = ws_end;
        continue;
      }
      const char c = src_[pos_];
      if (IsDigit(c)) {
        Number();
        continue;
      }
      if (IsNameStart(c)) {
        size_t e = pos_ + 1;
        while (e < src_.size() && IsNameChar(src_[e])) ++e;
        tokens_.push_back(Token{TokenType::kName, src_.substr(pos_, e - pos_), 0, 0, line_});
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        absl::Status st = String();
        if (!st.ok()) return st;
        continue;
      }
      static constexpr absl::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (absl::string_view two : kTwo) {
        if (absl::string_view(src_).substr(pos_, 2) == two) op = std::string(two);
      }
      if (op.empty() &&
          absl::string_view("+-/*%~[](){}><=.:|,;").find(c) != absl::string_view::npos) {
        op = std::string(1, c);
      }
      if (op.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line_, ": unexpected character '", std::string(1, c), "'"));
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty() || balance.back() != op[0]) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line_, ": unexpected '", op, "'"));
        }
        balance.pop_back();
      }
      tokens_.push_back(Token{TokenType::kOperator, op, 0, 0, line_});
      pos_ += op.size();
    }
  }

  void Number() {
    size_t e = pos_;
    const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() &&
        (src_[pos_ + 1] == 'x' || src_[pos_ + 1] == 'X' || src_[pos_ + 1] == 'o' ||
         src_[pos_ + 1] == 'O' || src_[pos_ + 1] == 'b' || src_[pos_ + 1] == 'B')) {
      const char base_char = static_cast<char>(src_[pos_ + 1] | 0x20);
      const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
      e = pos_ + 2;
      while (e < src_.size() && (HexValue(src_[e]) >= 0 && HexValue(src_[e]) < base)) ++e;
      const std::string digits = src_.substr(pos_ + 2, e - pos_ - 2);
      tokens_.push_back(Token{TokenType::kInt, src_.substr(pos_, e - pos_),
                              std::strtoll(digits.c_str(), nullptr, base), 0, line_});
      pos_ = e;
      return;
    }
    while (e < src_.size() && (IsDigit(src_[e]) || src_[e] == '_')) ++e;
    size_t f = e;
    bool is_float = false;
    if (!after_dot) {
      if (f + 1 < src_.size() && src_[f] == '.' && IsDigit(src_[f + 1])) {
        f += 1;
        while (f < src_.size() && (IsDigit(src_[f]) || src_[f] == '_')) ++f;
        is_float = true;
      }
      if (f < src_.size() && (src_[f] == 'e' || src_[f] == 'E')) {
        size_t g = f + 1;
        if (g < src_.size() && (src_[g] == '+' || src_[g] == '-')) ++g;
        if (g < src_.size() && IsDigit(src_[g])) {
          while (g < src_.size() && (IsDigit(src_[g]) || src_[g] == '_')) ++g;
          f = g;
          is_float = true;
        }
      }
    }
    std::string text;
    for (char ch : absl::string_view(src_).substr(pos_, (is_float ? f : e) - pos_)) {
      if (ch != '_') text.push_back(ch);
    }
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, text, 0, 0, line_};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
    }
    tokens_.push_back(std::move(t));
    pos_ = is_float ? f : e;
  }

  absl::Status String() {
    const char quote = src_[pos_];
    size_t e = pos_ + 1;
    while (e < src_.size() && src_[e] != quote) {
      if (src_[e] == '\\') ++e;
      ++e;
    }
    if (e >= src_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_, ": unterminated string literal"));
    }
    const absl::string_view body = absl::string_view(src_).substr(pos_ + 1, e - pos_ - 1);
    absl::StatusOr<std::string> value = Unescape(body, line_);
    if (!value.ok()) return value.status();
    tokens_.push_back(Token{TokenType::kString, std::move(*value), 0, 0, line_});
    line_ += CountNewlines(body);
    pos_ = e + 1;
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

// Newlines normalised to "\n"; one trailing newline dropped (keep_trailing_newline = False).
std::string Normalize(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source) {
  return Lexer(Normalize(source)).Run();
}

}  // namespace tandem::jinja
