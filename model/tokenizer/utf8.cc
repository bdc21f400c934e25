#include "model/tokenizer/utf8.h"

namespace tandem {

Utf8Step ScanUtf8(absl::string_view bytes) {
  const auto b0 = static_cast<uint8_t>(bytes[0]);
  if (b0 < 0x80) return {Utf8Status::kComplete, 1, b0};
  int need;
  char32_t cp;
  // Allowed range of the second byte depends on the lead (excludes overlongs, surrogates and
  // code points past U+10FFFF); later bytes are always 80..BF.
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Status::kInvalid, 1, 0};
  }
  for (int i = 1; i <= need; ++i) {
    if (static_cast<size_t>(i) >= bytes.size()) return {Utf8Status::kIncomplete, i, 0};
    const auto b = static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
    const uint8_t min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Utf8Status::kInvalid, i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Status::kComplete, need + 1, cp};
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string SanitizeUtf8(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const Utf8Step step = ScanUtf8(bytes);
    if (step.status == Utf8Status::kComplete) {
      out.append(bytes.data(), static_cast<size_t>(step.length));
    } else {
      out.append(kReplacementUtf8);
    }
    bytes.remove_prefix(static_cast<size_t>(step.length));
  }
  return out;
}

bool IsValidUtf8(absl::string_view bytes) {
  while (!bytes.empty()) {
    const Utf8Step step = ScanUtf8(bytes);
    if (step.status != Utf8Status::kComplete) return false;
    bytes.remove_prefix(static_cast<size_t>(step.length));
  }
  return true;
}

}  // namespace tandem
