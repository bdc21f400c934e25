// The chat-template lexer: Jinja2's (jinja2/lexer.py) with Hugging Face's settings —
// trim_blocks (the first newline after a block or comment tag is dropped), lstrip_blocks
// (whitespace from the start of a line up to a block or comment tag is dropped), `{%-`/`-%}`
// whitespace control on every tag kind, `+` to opt out, newlines normalised to "\n" and one
// trailing newline of the source dropped (keep_trailing_newline = False). Comments vanish here;
// {% raw %} blocks become text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::jinja {

enum class TokenType : uint8_t {
  kData,        // template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOperator,  // text holds the operator: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenType type;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// InvalidArgument naming the line for an unterminated tag, comment or string, an unexpected
// character or unbalanced brackets.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source);

}  // namespace tandem::jinja
