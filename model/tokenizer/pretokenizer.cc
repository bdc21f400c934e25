#include "model/tokenizer/pretokenizer.h"

#include <cstdint>

#include "model/tokenizer/unicode_class.h"
#include "model/tokenizer/utf8.h"

namespace tandem {
namespace {

enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

// Decoded text: code point, class bits and byte offset per character (plus an end sentinel
// offset), so matchers work on characters and pieces map back to byte ranges.
struct Chars {
  std::vector<char32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<size_t> offset;  // size() + 1 entries
};

Chars Decode(absl::string_view text) {
  Chars c;
  size_t at = 0;
  while (at < text.size()) {
    const Utf8Step step = ScanUtf8(text.substr(at));
    char32_t cp = 0xFFFFFFFF;  // ill-formed: in no class, equal to no ASCII character
    uint8_t cls = 0;
    if (step.status == Utf8Status::kComplete) {
      cp = step.codepoint;
      cls = static_cast<uint8_t>((IsUnicodeLetter(cp) ? kLetter : 0) |
                                 (IsUnicodeNumber(cp) ? kNumber : 0) |
                                 (IsUnicodeWhitespace(cp) ? kSpace : 0));
    }
    c.cp.push_back(cp);
    c.cls.push_back(cls);
    c.offset.push_back(at);
    at += static_cast<size_t>(step.length);
  }
  c.offset.push_back(text.size());
  return c;
}

class Matcher {
 public:
  Matcher(const Chars& c, size_t end) : c_(c), end_(end) {}

  bool Has(size_t i, uint8_t cls) const { return i < end_ && (c_.cls[i] & cls) != 0; }
  bool Other(size_t i) const { return i < end_ && (c_.cls[i] & (kLetter | kNumber | kSpace)) == 0; }
  bool Is(size_t i, char32_t ch) const { return i < end_ && c_.cp[i] == ch; }
  bool IsLower(size_t i, char ch) const {
    return i < end_ && (c_.cp[i] == static_cast<char32_t>(ch) ||
                        c_.cp[i] == static_cast<char32_t>(ch - 'a' + 'A'));
  }
  bool IsNewline(size_t i) const { return Is(i, '\r') || Is(i, '\n'); }

  size_t Skip(size_t i, uint8_t cls) const {
    while (Has(i, cls)) ++i;
    return i;
  }
  size_t SkipOther(size_t i) const {
    while (Other(i)) ++i;
    return i;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive; returns the end or i.
  size_t Contraction(size_t i, bool ignore_case) const {
    if (!Is(i, '\'')) return i;
    auto at = [&](size_t k, char ch) { return ignore_case ? IsLower(k, ch) : Is(k, ch); };
    if (at(i + 1, 's') || at(i + 1, 't') || at(i + 1, 'm') || at(i + 1, 'd')) return i + 2;
    if ((at(i + 1, 'r') && at(i + 2, 'e')) || (at(i + 1, 'v') && at(i + 2, 'e')) ||
        (at(i + 1, 'l') && at(i + 2, 'l'))) {
      return i + 3;
    }
    return i;
  }

  // \s+(?!\S)|\s+ at i (REQUIRES Has(i, kSpace)).
  size_t Whitespace(size_t i) const {
    const size_t run = Skip(i, kSpace);
    if (run == end_) return run;
    // Followed by a non-space: give back the last space so the lookahead sees a space, unless
    // that would leave nothing (then the plain \s+ takes the single space).
    return run - i >= 2 ? run - 1 : run;
  }

  size_t Gpt2(size_t i) const {
    if (size_t e = Contraction(i, false); e != i) return e;
    const size_t j = Is(i, ' ') ? i + 1 : i;
    if (Has(j, kLetter)) return Skip(j, kLetter);
    if (Has(j, kNumber)) return Skip(j, kNumber);
    if (Other(j)) return SkipOther(j);
    if (Has(i, kSpace)) return Whitespace(i);
    return i + 1;  // unreachable: every character is a letter, number, space or other
  }

  // kLlama3 (max_digits 3) and kQwen2 (max_digits 1).
  size_t Llama3(size_t i, size_t max_digits) const {
    if (size_t e = Contraction(i, true); e != i) return e;
    if (i < end_ && !Has(i, kLetter | kNumber) && !IsNewline(i) && Has(i + 1, kLetter)) {
      return Skip(i + 1, kLetter);
    }
    if (Has(i, kLetter)) return Skip(i, kLetter);
    if (Has(i, kNumber)) {
      size_t e = i;
      while (e - i < max_digits && Has(e, kNumber)) ++e;
      return e;
    }
    if (size_t j = Is(i, ' ') ? i + 1 : i; Other(j)) {
      size_t e = SkipOther(j);
      while (IsNewline(e)) ++e;
      return e;
    }
    if (Has(i, kSpace)) {
      const size_t run = Skip(i, kSpace);
      for (size_t k = run; k > i; --k) {
        if (IsNewline(k - 1)) return k;  // \s*[\r\n]+ ends at the run's last newline
      }
      return Whitespace(i);
    }
    return i + 1;
  }

 private:
  const Chars& c_;
  size_t end_;
};

void SplitRange(PreTokenizerKind kind, const Chars& c, size_t begin, size_t end,
                absl::string_view text, std::vector<absl::string_view>* out) {
  const Matcher m(c, end);
  for (size_t i = begin; i < end;) {
    const size_t e = kind == PreTokenizerKind::kLlama3  ? m.Llama3(i, 3)
                     : kind == PreTokenizerKind::kQwen2 ? m.Llama3(i, 1)
                                                        : m.Gpt2(i);
    out->push_back(text.substr(c.offset[i], c.offset[e] - c.offset[i]));
    i = e;
  }
}

}  // namespace

std::optional<PreTokenizerKind> PreTokenizerForGgufPre(absl::string_view pre) {
  // Names llama.cpp gives the same regexes (and that differ in nothing Tandem implements).
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2" || pre == "mpt") {
    return PreTokenizerKind::kGpt2;
  }
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r") {
    return PreTokenizerKind::kDigitsGpt2;
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return PreTokenizerKind::kLlama3;
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreTokenizerKind::kQwen2;
  return std::nullopt;
}

std::vector<absl::string_view> PreTokenize(PreTokenizerKind kind, absl::string_view text) {
  const Chars c = Decode(text);
  std::vector<absl::string_view> out;
  const size_t n = c.cp.size();
  if (kind != PreTokenizerKind::kDigitsGpt2) {
    SplitRange(kind, c, 0, n, text, &out);
    return out;
  }
  for (size_t i = 0; i < n;) {
    if (c.cls[i] & kNumber) {
      out.push_back(text.substr(c.offset[i], c.offset[i + 1] - c.offset[i]));
      ++i;
      continue;
    }
    size_t e = i;
    while (e < n && !(c.cls[e] & kNumber)) ++e;
    SplitRange(PreTokenizerKind::kGpt2, c, i, e, text, &out);
    i = e;
  }
  return out;
}

}  // namespace tandem
