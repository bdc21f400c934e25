#include "model/tokenizer/byte_level.h"

#include <array>

#include "model/tokenizer/utf8.h"

namespace tandem {
namespace {

bool MapsToItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_unicode;
  std::array<int16_t, 324> to_byte;  // the image lies below U+0100 + 68
};

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    t.to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      t.to_unicode[b] = MapsToItself(b) ? static_cast<char32_t>(b) : next++;
      t.to_byte[t.to_unicode[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

}  // namespace

char32_t ByteToUnicode(uint8_t byte) { return GetTables().to_unicode[byte]; }

int UnicodeToByte(char32_t cp) {
  const Tables& t = GetTables();
  return cp < t.to_byte.size() ? t.to_byte[cp] : -1;
}

std::string BytesToByteLevel(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

bool ByteLevelToBytes(absl::string_view text, std::string* out) {
  out->clear();
  while (!text.empty()) {
    const Utf8Step step = ScanUtf8(text);
    if (step.status != Utf8Status::kComplete) return false;
    const int b = UnicodeToByte(step.codepoint);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
    text.remove_prefix(static_cast<size_t>(step.length));
  }
  return true;
}

}  // namespace tandem
