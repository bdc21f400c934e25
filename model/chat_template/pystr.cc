#include "model/chat_template/pystr.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::jinja {
namespace {

// Length of the UTF-8 sequence starting with lead byte b (1 for a bad byte).
int SeqLen(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

bool InSet(char32_t c, std::u32string_view set) { return set.find(c) != std::u32string_view::npos; }

}  // namespace

std::u32string DecodeUtf8(absl::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    const int n = SeqLen(b);
    if (n == 1 || i + n > s.size()) {
      out.push_back(b < 0x80 ? b : 0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = b & (0x7F >> n);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const unsigned char c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (c & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

int64_t CodePointCount(absl::string_view s) {
  int64_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool IsPyDigit(char32_t c) { return c >= '0' && c <= '9'; }

char32_t ToUpper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t ToLower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool IsCased(char32_t c) {
  if (c == 0xDF || c == 0xAA || c == 0xBA) return true;
  return ToUpper(c) != c || ToLower(c) != c;
}

bool IsPyAlpha(char32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  if (c < 0x80) return false;
  if (IsCased(c)) return true;
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) ||
         (c >= 0xAC00 && c <= 0xD7A3);
}

bool IsPyPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
      (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xF8FF) || c >= 0xF0000 ||
      (c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E) {
    return false;
  }
  return true;
}

std::string PyUpper(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : DecodeUtf8(s)) {
    if (c == 0xDF) {
      out += "SS";
    } else {
      AppendUtf8(ToUpper(c), &out);
    }
  }
  return out;
}

std::string PyLower(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : DecodeUtf8(s)) AppendUtf8(ToLower(c), &out);
  return out;
}

std::string PyTitle(absl::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    if (prev_cased) {
      AppendUtf8(ToLower(c), &out);
    } else {
      AppendUtf8(ToUpper(c), &out);
    }
    prev_cased = IsCased(c);
  }
  return out;
}

std::string PyCapitalize(absl::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : DecodeUtf8(s)) {
    AppendUtf8(first ? ToUpper(c) : ToLower(c), &out);
    first = false;
  }
  return out;
}

std::string PyStrip(absl::string_view s, const std::string* chars, bool left, bool right) {
  const std::u32string cps = DecodeUtf8(s);
  const std::u32string set = chars != nullptr ? DecodeUtf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars == nullptr ? IsPySpace(c) : InSet(c, set); };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> PySplit(absl::string_view s, const std::string* sep, int64_t maxsplit,
                                 bool from_right) {
  std::vector<std::string> out;
  if (sep == nullptr) {
    const std::u32string cps = DecodeUtf8(s);
    if (!from_right) {
      size_t i = 0;
      while (true) {
        while (i < cps.size() && IsPySpace(cps[i])) ++i;
        if (i >= cps.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
          size_t e = cps.size();
          while (e > i && IsPySpace(cps[e - 1])) --e;
          out.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, e - i)));
          break;
        }
        size_t j = i;
        while (j < cps.size() && !IsPySpace(cps[j])) ++j;
        out.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, j - i)));
        i = j;
      }
    } else {
      size_t i = cps.size();
      while (true) {
        while (i > 0 && IsPySpace(cps[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
          size_t b = 0;
          while (b < i && IsPySpace(cps[b])) ++b;
          out.push_back(EncodeUtf8(std::u32string_view(cps).substr(b, i - b)));
          break;
        }
        size_t j = i;
        while (j > 0 && !IsPySpace(cps[j - 1])) --j;
        out.push_back(EncodeUtf8(std::u32string_view(cps).substr(j, i - j)));
        i = j;
      }
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  // Separator given (the caller refuses an empty one, as Python does).
  if (!from_right) {
    size_t pos = 0;
    while (true) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
      const size_t hit = s.find(*sep, pos);
      if (hit == absl::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
  } else {
    size_t end = s.size();
    while (true) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
      if (end < sep->size()) break;
      const size_t hit = s.substr(0, end).rfind(*sep);
      if (hit == absl::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::vector<std::string> PySplitLines(absl::string_view s, bool keepends) {
  const std::u32string cps = DecodeUtf8(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                     c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (c == '\r' && eol < cps.size() && cps[eol] == '\n') ++eol;
    out.push_back(EncodeUtf8(std::u32string_view(cps).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < cps.size()) out.push_back(EncodeUtf8(std::u32string_view(cps).substr(start)));
  return out;
}

std::string PyReplace(absl::string_view s, absl::string_view old, absl::string_view repl,
                      int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts repl before every character and at the end.
    const std::u32string cps = DecodeUtf8(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        absl::StrAppend(&out, repl);
        ++done;
      }
      AppendUtf8(c, &out);
    }
    if (count < 0 || done < count) absl::StrAppend(&out, repl);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == absl::string_view::npos) break;
    absl::StrAppend(&out, s.substr(pos, hit - pos));
    absl::StrAppend(&out, repl);
    pos = hit + old.size();
    ++done;
  }
  absl::StrAppend(&out, s.substr(pos));
  return out;
}

int64_t PyFind(absl::string_view s, absl::string_view sub, bool from_right) {
  const size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == absl::string_view::npos) return -1;
  return CodePointCount(s.substr(0, hit));
}

int64_t PyCount(absl::string_view s, absl::string_view sub) {
  if (sub.empty()) return CodePointCount(s) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(sub, pos);
    if (hit == absl::string_view::npos) break;
    ++n;
    pos = hit + sub.size();
  }
  return n;
}

std::string PyReprString(absl::string_view s) {
  const bool has_single = s.find('\'') != absl::string_view::npos;
  const bool has_double = s.find('"') != absl::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (!IsPyPrintable(c)) {
      if (c < 0x100) {
        out += absl::StrFormat("\\x%02x", static_cast<uint32_t>(c));
      } else if (c < 0x10000) {
        out += absl::StrFormat("\\u%04x", static_cast<uint32_t>(c));
      } else {
        out += absl::StrFormat("\\U%08x", static_cast<uint32_t>(c));
      }
    } else {
      AppendUtf8(c, &out);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace tandem::jinja
