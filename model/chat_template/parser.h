// The chat-template parser: tokens -> syntax tree, following jinja2/parser.py (operator
// precedence, tuples, filters and tests binding after postfix expressions, chained comparisons,
// `for ... if ...`, `set` on namespace attributes, macros and call blocks), plus the tags
// transformers enables: loopcontrols' {% break %}/{% continue %} and {% generation %}.
//
// Tags outside the supported subset (extends, block, include, import, from, autoescape, recursive
// loops) are refused with an error naming the tag and its line. Validate() then refuses what
// would parse but not evaluate: unknown filters, tests, methods and global functions.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/chat_template/ast.h"
#include "model/chat_template/lexer.h"

namespace tandem::jinja {

// InvalidArgument "line N: ..." for syntax errors and unsupported tags.
absl::StatusOr<Body> Parse(std::vector<Token> tokens);

// InvalidArgument naming the first construct the interpreter does not implement, e.g.
// "unsupported filter 'from_json' at line 12".
absl::Status Validate(const Body& body);

}  // namespace tandem::jinja
