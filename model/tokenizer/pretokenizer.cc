#include "model/tokenizer/pretokenizer.h"

#include <cstdint>
#include <functional>

#include "model/tokenizer/unicode_class.h"
#include "model/tokenizer/utf8.h"

namespace tandem {
namespace {

enum : uint8_t {
  kLetter = 1,
  kNumber = 2,
  kSpace = 4,
  kMark = 8,
  kPunctuation = 16,
  kDeepseekLetter = 32,  // IsDeepseekLlmLetter
  kDeepseekPunct = 64,   // [!-/:-~！-／：-～‘-‟　-。] of DeepSeek LLM's regex
};

bool IsDeepseekPunct(char32_t cp) {
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E) ||
         (cp >= 0xFF01 && cp <= 0xFF0F) || (cp >= 0xFF1A && cp <= 0xFF5E) ||
         (cp >= 0x2018 && cp <= 0x201F) || (cp >= 0x3000 && cp <= 0x3002);
}

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
      cls = static_cast<uint8_t>(
          (IsUnicodeLetter(cp) ? kLetter : 0) | (IsUnicodeNumber(cp) ? kNumber : 0) |
          (IsUnicodeWhitespace(cp) ? kSpace : 0) | (IsUnicodeMark(cp) ? kMark : 0) |
          (IsUnicodePunctuation(cp) ? kPunctuation : 0) |
          (IsDeepseekLlmLetter(cp) ? kDeepseekLetter : 0) |
          // llama.cpp matches these regexes after turning non-ASCII whitespace into \v, so
          // U+3000 is whitespace, not one of DeepSeek's punctuation marks.
          (IsDeepseekPunct(cp) && !IsUnicodeWhitespace(cp) ? kDeepseekPunct : 0));
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
  Matcher(const Chars& c, size_t begin, size_t end) : c_(c), begin_(begin), end_(end) {}

  bool Has(size_t i, uint8_t cls) const { return i < end_ && (c_.cls[i] & cls) != 0; }
  // [^\s\p{L}\p{N}] (and, with kMark in `classes`, not \p{M} either).
  bool Other(size_t i, uint8_t classes = kLetter | kNumber | kSpace) const {
    return i < end_ && (c_.cls[i] & classes) == 0;
  }
  bool InRange(size_t i, char32_t lo, char32_t hi) const {
    return i < end_ && c_.cp[i] >= lo && c_.cp[i] <= hi;
  }
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
  size_t SkipOther(size_t i, uint8_t classes = kLetter | kNumber | kSpace) const {
    while (Other(i, classes)) ++i;
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

  // kLlama3 (max_digits 3, no marks), kQwen2 (1, no marks) and kQwen35 (1, marks: letter runs
  // are [\p{L}\p{M}]+ and "other" excludes \p{M}).
  size_t Llama3(size_t i, size_t max_digits, bool marks) const {
    if (size_t e = Contraction(i, true); e != i) return e;
    const uint8_t word = marks ? kLetter | kMark : kLetter;
    if (i < end_ && !Has(i, kLetter | kNumber) && !IsNewline(i) && Has(i + 1, word)) {
      return Skip(i + 1, word);
    }
    if (Has(i, word)) return Skip(i, word);
    if (Has(i, kNumber)) {
      size_t e = i;
      while (e - i < max_digits && Has(e, kNumber)) ++e;
      return e;
    }
    const uint8_t other = marks ? kLetter | kNumber | kSpace | kMark : kLetter | kNumber | kSpace;
    if (size_t j = Is(i, ' ') ? i + 1 : i; Other(j, other)) {
      size_t e = SkipOther(j, other);
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

  // \s?X+ where X is the class `cls`; returns i when nothing matches at i.
  size_t SpaceThenRun(size_t i, uint8_t cls) const {
    if (Has(i, kSpace) && Has(i + 1, cls)) return Skip(i + 1, cls);
    return Skip(i, cls);
  }

  // Falcon's [\p{P}\$\+<=>\^~\|`]+: punctuation and every ASCII symbol.
  bool FalconPunct(size_t i) const {
    if (i >= end_) return false;
    const char32_t cp = c_.cp[i];
    if (cp < 0x80) return cp > 0x20 && cp < 0x7F && !IsAsciiAlnum(cp);
    return (c_.cls[i] & kPunctuation) != 0;
  }
  size_t FalconPunctRun(size_t i) const {
    while (FalconPunct(i)) ++i;
    return i;
  }

  // \s+$: the whitespace that ends the range. Tried only where a whitespace run starts, so a
  // long run in the middle costs one scan, not one per character.
  size_t TrailingWhitespace(size_t i) const {
    if (!Has(i, kSpace) || (i > begin_ && Has(i - 1, kSpace))) return i;
    const size_t e = Skip(i, kSpace);
    return e == end_ ? e : i;
  }

  // [0-9][0-9][0-9]
  size_t ThreeAsciiDigits(size_t i) const {
    for (size_t k = i; k < i + 3; ++k) {
      if (!InRange(k, '0', '9')) return i;
    }
    return i + 3;
  }

  // DeepSeek's [一-龥ࠀ-一가-퟿]+ (U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF), less the
  // whitespace in those ranges (llama.cpp matches it after turning that into \v).
  size_t CjkRun(size_t i) const {
    while (!Has(i, kSpace) && (InRange(i, 0x4E00, 0x9FA5) || InRange(i, 0x0800, 0x4E00) ||
                               InRange(i, 0xAC00, 0xD7FF))) {
      ++i;
    }
    return i;
  }

 private:
  static bool IsAsciiAlnum(char32_t cp) {
    return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
  }

  const Chars& c_;
  size_t begin_, end_;
};

// One step of a pre-tokenizer: the end of the match at i, or i when none starts there.
using Stage = std::function<size_t(const Matcher&, size_t)>;

struct Range {
  size_t begin, end;  // character indices
};

// Splits every range as a regex split with "isolated" behaviour does (llama.cpp's
// unicode_regex_split): each leftmost match is a piece, and so is each stretch between matches.
std::vector<Range> Split(const Chars& c, const std::vector<Range>& ranges, const Stage& stage) {
  std::vector<Range> out;
  out.reserve(ranges.size());
  for (const Range& r : ranges) {
    const Matcher m(c, r.begin, r.end);
    size_t gap = r.begin;
    for (size_t i = r.begin; i < r.end;) {
      const size_t e = stage(m, i);
      if (e == i) {
        ++i;
        continue;
      }
      if (gap < i) out.push_back({gap, i});
      out.push_back({i, e});
      i = gap = e;
    }
    if (gap < r.end) out.push_back({gap, r.end});
  }
  return out;
}

std::vector<Stage> StagesOf(PreTokenizerKind kind) {
  const Stage gpt2 = [](const Matcher& m, size_t i) { return m.Gpt2(i); };
  const Stage each_number = [](const Matcher& m, size_t i) {
    return m.Has(i, kNumber) ? i + 1 : i;
  };
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      return {gpt2};
    case PreTokenizerKind::kDigitsGpt2:
      return {each_number, gpt2};
    case PreTokenizerKind::kLlama3:
      return {[](const Matcher& m, size_t i) { return m.Llama3(i, 3, false); }};
    case PreTokenizerKind::kQwen2:
      return {[](const Matcher& m, size_t i) { return m.Llama3(i, 1, false); }};
    case PreTokenizerKind::kQwen35:
      return {[](const Matcher& m, size_t i) { return m.Llama3(i, 1, true); }};
    case PreTokenizerKind::kFalcon:
      return {[](const Matcher& m, size_t i) { return m.FalconPunctRun(i); }, gpt2,
              [](const Matcher& m, size_t i) { return m.ThreeAsciiDigits(i); }};
    case PreTokenizerKind::kDeepseekCoder:
      return {[](const Matcher& m, size_t i) { return m.IsNewline(i) ? i + 1 : i; },
              [](const Matcher& m, size_t i) { return m.SpaceThenRun(i, kLetter); },
              [](const Matcher& m, size_t i) { return m.SpaceThenRun(i, kPunctuation); },
              [](const Matcher& m, size_t i) { return m.CjkRun(i); }, each_number};
    case PreTokenizerKind::kDeepseekLlm:
      return {[](const Matcher& m, size_t i) { return m.IsNewline(i) ? i + 1 : i; },
              [](const Matcher& m, size_t i) { return m.SpaceThenRun(i, kDeepseekLetter); },
              [](const Matcher& m, size_t i) { return m.SpaceThenRun(i, kDeepseekPunct); },
              [](const Matcher& m, size_t i) { return m.TrailingWhitespace(i); },
              [](const Matcher& m, size_t i) { return m.CjkRun(i); },
              [](const Matcher& m, size_t i) { return m.Skip(i, kNumber); }};
  }
  return {gpt2};
}

}  // namespace

std::optional<PreTokenizerKind> PreTokenizerForGgufPre(absl::string_view pre) {
  // Names llama.cpp gives the same regexes (and that differ in nothing Tandem implements).
  // "default" is not GPT-2's: it is what a converter writes when it did not recognise the
  // pre-tokenizer, and llama.cpp then guesses with yet another regex; Tandem refuses to guess.
  if (pre == "gpt-2" || pre == "gpt2" || pre == "mpt") {
    return PreTokenizerKind::kGpt2;
  }
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r") {
    return PreTokenizerKind::kDigitsGpt2;
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return PreTokenizerKind::kLlama3;
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreTokenizerKind::kQwen2;
  if (pre == "qwen35") return PreTokenizerKind::kQwen35;
  if (pre == "falcon") return PreTokenizerKind::kFalcon;
  if (pre == "deepseek-coder") return PreTokenizerKind::kDeepseekCoder;
  if (pre == "deepseek-llm") return PreTokenizerKind::kDeepseekLlm;
  return std::nullopt;
}

std::vector<absl::string_view> PreTokenize(PreTokenizerKind kind, absl::string_view text) {
  const Chars c = Decode(text);
  std::vector<Range> ranges;
  if (!c.cp.empty()) ranges.push_back({0, c.cp.size()});
  for (const Stage& stage : StagesOf(kind)) ranges = Split(c, ranges, stage);
  std::vector<absl::string_view> out;
  out.reserve(ranges.size());
  for (const Range& r : ranges) {
    out.push_back(text.substr(c.offset[r.begin], c.offset[r.end] - c.offset[r.begin]));
  }
  return out;
}

}  // namespace tandem
