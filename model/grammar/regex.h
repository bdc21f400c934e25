// Regular expression -> GBNF (vLLM's guided_regex; JSON Schema `pattern`).
//
// The output matches the whole regex (as std::regex_match / Python's re.fullmatch). Subset:
//   literals; escapes \n \r \t \f \v \0 \\ \. etc. (any non-alphanumeric escaped is itself),
//   \xHH, \uHHHH, \u{H...}; classes [a-z] [^...] with \d \w \s \D \W \S inside; \d \w \s \D \W
//   \S; . (any code point but \n); groups (...) and (?:...) and named (?<n>...)/(?P<n>...)
//   (capture is irrelevant here); alternation |; quantifiers ? * + {m} {m,} {m,n} (a lazy
//   or possessive suffix ? / + changes nothing for matching and is accepted); ^ at the very
//   start and $ at the very end.
// Refused by name (InvalidArgument "regex: ... at offset N"): lookahead/lookbehind,
// backreferences (\1, \k<n>), \b \B, anchors elsewhere, inline flags (?i) etc., Unicode
// properties \p{..}, atomic groups. Counts above 1000 are refused.
// \d is [0-9], \w is [A-Za-z0-9_], \s is [ \t\n\r\f\v] (ASCII, as ECMAScript without /u
// treats \d and \w; \s here leaves out Unicode spaces).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem {

struct RegexGbnfOptions {
  // JSON Schema's `pattern` is a search, not a full match: without ^ the match may start
  // anywhere (any characters before it), without $ it may end anywhere.
  bool search = false;
  // Emit the text as the inside of a JSON string: '"' and '\' and \n \r \t are written as
  // escapes, other control characters are left out.
  bool json_string_content = false;
};

absl::StatusOr<std::string> RegexToGbnf(std::string_view regex,
                                        std::string_view root_rule = "root");
absl::StatusOr<std::string> RegexToGbnf(std::string_view regex, std::string_view root_rule,
                                        const RegexGbnfOptions& options);

}  // namespace tandem
