// GBNF for a range of non-negative integers (JSON Schema's minimum/maximum on integers), written
// digit by digit as llama.cpp's json-schema-to-grammar does.
#include "model/grammar/integer_range_gbnf.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/grammar/gbnf.h"

namespace tandem::grammar_internal {
namespace {

// Decimal digits of a non-negative number.
std::string Digits(uint64_t v) { return std::to_string(v); }

// GBNF for the decimal numbers in [lo, hi] written with exactly as many digits as both have
// (same length strings), leading zeros allowed inside (callers handle the first digit).
std::string SameLength(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo == hi) return GbnfLiteral(lo);
  const size_t n = lo.size();
  if (lo == std::string(n, '0') && hi == std::string(n, '9')) {
    return n == 1 ? "[0-9]" : absl::StrCat("[0-9]{", n, "}");
  }
  if (lo[0] == hi[0]) {
    return absl::StrCat(GbnfLiteral(lo.substr(0, 1)), " ", SameLength(lo.substr(1), hi.substr(1)));
  }
  std::vector<std::string> alts;
  const std::string rest9(n - 1, '9'), rest0(n - 1, '0');
  // lo[0] followed by [lo[1..], 9..9]
  alts.push_back(absl::StrCat(GbnfLiteral(lo.substr(0, 1)), n > 1 ? " " : "",
                              SameLength(lo.substr(1), rest9)));
  if (hi[0] - lo[0] > 1) {
    const char a = lo[0] + 1, b = hi[0] - 1;
    std::string cls = a == b ? GbnfLiteral(std::string(1, a))
                             : absl::StrCat("[", std::string(1, a), "-", std::string(1, b), "]");
    alts.push_back(n > 1 ? absl::StrCat(cls, " ", SameLength(rest0, rest9)) : cls);
  }
  alts.push_back(absl::StrCat(GbnfLiteral(hi.substr(0, 1)), n > 1 ? " " : "",
                              SameLength(rest0, hi.substr(1))));
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

// GBNF for non-negative integers in [lo, hi] without leading zeros.
}  // namespace

std::string NonNegativeRangeGbnf(uint64_t lo, uint64_t hi) {
  std::vector<std::string> alts;
  const size_t lo_len = Digits(lo).size(), hi_len = Digits(hi).size();
  for (size_t len = lo_len; len <= hi_len; ++len) {
    uint64_t a = len == 1 ? 0 : 1;
    for (size_t i = 1; i < len; ++i) a *= 10;  // 10^(len-1)
    uint64_t b = a == 0 ? 9 : a * 10 - 1;
    a = std::max(a, lo);
    b = std::min(b, hi);
    if (a > b) continue;
    alts.push_back(SameLength(Digits(a), Digits(b)));
  }
  if (alts.size() == 1) return alts[0];
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

}  // namespace tandem::grammar_internal
