// UTF-8 scanning by the well-formedness table of Unicode §3.9 (Table 3-7), with the
// "maximal subpart" rule for ill-formed input: each maximal subpart (the longest prefix of a
// well-formed sequence, or a single byte that cannot start one) becomes one U+FFFD. This is
// the rule Rust's String::from_utf8_lossy follows, so Tandem's decoder matches HF's.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tandem {

inline constexpr char kReplacementUtf8[] = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Status {
  kComplete,    // a well-formed sequence of `length` bytes
  kIncomplete,  // the remaining bytes are a proper prefix of a well-formed sequence
  kInvalid,     // `length` bytes form a maximal ill-formed subpart
};

struct Utf8Step {
  Utf8Status status;
  int length;          // bytes consumed (kIncomplete: bytes available)
  char32_t codepoint;  // kComplete only
};

// Classifies the sequence starting at bytes[0]. REQUIRES: !bytes.empty().
Utf8Step ScanUtf8(absl::string_view bytes);

// Appends the UTF-8 encoding of cp (REQUIRES: a Unicode scalar value).
void AppendUtf8(char32_t cp, std::string* out);

// bytes with every ill-formed maximal subpart (including a truncated tail) replaced by U+FFFD.
std::string SanitizeUtf8(absl::string_view bytes);

bool IsValidUtf8(absl::string_view bytes);

}  // namespace tandem
