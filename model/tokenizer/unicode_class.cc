#include "model/tokenizer/unicode_class.h"

#include <algorithm>
#include <iterator>

namespace tandem {
namespace {

struct CodepointRange {
  char32_t lo, hi;  // inclusive
};

#include "model/tokenizer/unicode_tables.inc"

template <size_t N>
bool InRanges(const CodepointRange (&ranges)[N], char32_t cp) {
  // First range whose upper end is >= cp; cp is inside iff that range starts at or below it.
  const CodepointRange* it =
      std::lower_bound(std::begin(ranges), std::end(ranges), cp,
                       [](const CodepointRange& r, char32_t c) { return r.hi < c; });
  return it != std::end(ranges) && it->lo <= cp;
}

}  // namespace

bool IsUnicodeLetter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(kLetterRanges, cp);
}

bool IsUnicodeNumber(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(kNumberRanges, cp);
}

bool IsUnicodeMark(char32_t cp) { return cp >= 0x300 && InRanges(kMarkRanges, cp); }

bool IsUnicodePunctuation(char32_t cp) { return InRanges(kPunctuationRanges, cp); }

bool IsUnicodeWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace tandem
