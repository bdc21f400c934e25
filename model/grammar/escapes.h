// The control-character escapes GBNF literals and regexes share (\n \r \t \f \v \0); each parser
// handles its other escapes itself.
#pragma once

#include <cstdint>
#include <optional>

namespace tandem::grammar_internal {

inline std::optional<uint32_t> ControlEscape(char e) {
  switch (e) {
    case 'n':
      return uint32_t{'\n'};
    case 'r':
      return uint32_t{'\r'};
    case 't':
      return uint32_t{'\t'};
    case 'f':
      return uint32_t{'\f'};
    case 'v':
      return uint32_t{'\v'};
    case '0':
      return uint32_t{0};
    default:
      return std::nullopt;
  }
}

}  // namespace tandem::grammar_internal
