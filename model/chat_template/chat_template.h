// Chat templates (tokenizer.chat_template): the Jinja programs models ship to turn a
// conversation into prompt text, rendered exactly as Hugging Face transformers'
// apply_chat_template renders them — Python's jinja2 in an ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols extension, {% generation %}, a `tojson` filter
// that is json.dumps(ensure_ascii=False), and the globals raise_exception and strftime_now.
//
// No Debian package offers a C++ Jinja engine (jinja2 is Python; the C++ ports are not packaged),
// so this directory holds Tandem's own renderer for the subset real templates use:
//   lexer.h        whitespace control ({%- -%}, trim_blocks, lstrip_blocks), comments, raw blocks
//   parser.h       expressions with Jinja2's precedence, if/elif/else, for (with `if` filters,
//                  else, tuple unpacking, loop.*), set (incl. namespace attributes and blocks),
//                  macros (defaults, varargs, kwargs, caller), call and filter blocks, with,
//                  break/continue; and the validator that refuses what the interpreter lacks
//   interpreter.h  scoping, macros, the globals range/dict/namespace/raise_exception/strftime_now
//   value.h        Python values: None, bool, int, float, str (code-point semantics), list,
//                  tuple, dict, generators/dict views/ranges, namespace, Undefined, Markup
//   builtins.h     filters (filters.cc), tests (tests.cc), str/dict/list methods (methods.cc),
//                  getattr/getitem/slices and operators (operators.cc), json.dumps (json.cc)
// tests/model/chat_template/ checks it byte for byte against jinja2 on the real templates of
// llama.cpp's models/templates/ (deploy/fetch-llamacpp-data.sh).
//
// A template using anything outside the subset (extends/include/import, recursive loops, a
// filter, test, method or global function Tandem does not implement) is refused by Parse with an
// error naming the construct and its line, e.g. "unsupported filter 'from_json' at line 12".
//
// Immutable after Parse; Render is thread-safe.
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/chat_template/ast.h"
#include "model/chat_template/interpreter.h"
#include "model/chat_template/value.h"

namespace tandem {

class ChatTemplate {
 public:
  // InvalidArgument for a syntax error or an unsupported construct (named, with its line).
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> Parse(absl::string_view source);

  // Renders with `variables` as the template's context (transformers passes messages, tools,
  // documents, add_generation_prompt and the special tokens). strftime_now formats `now`.
  // Errors: InvalidArgument with the template's own message for raise_exception(...) (the
  // template refuses the conversation: IsRaisedByTemplate), InvalidArgument "chat template line
  // N: ..." when evaluation fails (an undefined value used, a type error, ...).
  // `limits` bounds the work (interpreter.h RenderLimits).
  absl::StatusOr<std::string> Render(const jinja::Map& variables, const std::tm& now,
                                     const jinja::RenderLimits& limits = {}) const;
  // The same with the current local date (Python's datetime.now()).
  absl::StatusOr<std::string> Render(const jinja::Map& variables) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  jinja::Body body_;
};

// Whether a Render error came from the template's raise_exception(...).
bool IsRaisedByTemplate(const absl::Status& status);

}  // namespace tandem
