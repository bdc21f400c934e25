// Python str operations on UTF-8 text, for the chat-template renderer: code-point views (len,
// indexing and slicing count code points as Python's do), whitespace as str.split()/strip() see
// it, case mapping (ASCII and Latin-1/Latin Extended-A/Greek/Cyrillic pairs; other scripts are
// unchanged, a documented limit) and the str methods templates call.
//
// Ill-formed UTF-8 decodes to one U+FFFD per bad byte (template text and JSON request strings
// are valid UTF-8). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/tokenizer/utf8.h"

namespace tandem::jinja {

std::u32string DecodeUtf8(absl::string_view s);
std::string EncodeUtf8(std::u32string_view s);
using ::tandem::AppendUtf8;  // model/tokenizer/utf8.h
// Number of code points.
int64_t CodePointCount(absl::string_view s);

bool IsPySpace(char32_t c);      // str.isspace() for one character
bool IsPyAlpha(char32_t c);      // approximation: letters of the cased scripts above + CJK
bool IsPyDigit(char32_t c);      // ASCII digits
bool IsPyPrintable(char32_t c);  // str.isprintable() (what repr() leaves unescaped)
char32_t ToUpper(char32_t c);
char32_t ToLower(char32_t c);
bool IsCased(char32_t c);

std::string PyUpper(absl::string_view s);
std::string PyLower(absl::string_view s);
std::string PyTitle(absl::string_view s);       // str.title()
std::string PyCapitalize(absl::string_view s);  // str.capitalize()

// str.strip/lstrip/rstrip: chars == nullptr strips whitespace, else the given characters.
std::string PyStrip(absl::string_view s, const std::string* chars, bool left, bool right);

// str.split(sep, maxsplit) / str.rsplit: sep == nullptr splits on whitespace runs.
std::vector<std::string> PySplit(absl::string_view s, const std::string* sep, int64_t maxsplit,
                                 bool from_right = false);
// str.splitlines(keepends)
std::vector<std::string> PySplitLines(absl::string_view s, bool keepends);

// str.replace(old, new, count): count < 0 replaces all.
std::string PyReplace(absl::string_view s, absl::string_view old, absl::string_view repl,
                      int64_t count);

// str.find / rfind / count in code points, over s[start:end] (Python slice bounds already
// clamped by the caller: 0 <= start <= end <= len in code points).
int64_t PyFind(absl::string_view s, absl::string_view sub, bool from_right);
int64_t PyCount(absl::string_view s, absl::string_view sub);

// Python's repr of a str.
std::string PyReprString(absl::string_view s);

}  // namespace tandem::jinja
