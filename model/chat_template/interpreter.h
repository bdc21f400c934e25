// Runs a parsed chat template: Jinja2's scoping (a fresh scope per loop iteration, macro and
// call-block scopes, `if` without one, namespace() attributes assignable from any scope), the
// `loop` variable, macros with defaults, varargs/kwargs and caller(), and the globals range,
// dict, namespace, raise_exception and strftime_now.
#pragma once

#include <ctime>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat_template/ast.h"
#include "model/chat_template/value.h"

namespace tandem::jinja {

// The payload marking a status that raise_exception() produced (its message is the template's).
inline constexpr char kRaisedPayload[] = "type.tandem/jinja.raise_exception";

// The longest string (bytes) and list (items) a render builds by default (`*`, `+`, `~`, join,
// split, a string's characters, ...). Items are Values of tens of bytes each, so lists have their
// own, smaller bound: without it one list of a 64 MiB string's characters takes gigabytes.
inline constexpr size_t kMaxBuiltSize = size_t{64} << 20;
inline constexpr size_t kMaxBuiltItems = size_t{1} << 20;

// Bounds on one render, so that no template (nor conversation) can run away with memory or
// time; far above what real chat templates need.
struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  // One string and one list (MemoryError past them); neither above kMaxBuiltSize.
  size_t max_built_bytes = kMaxBuiltSize;
  size_t max_built_items = kMaxBuiltItems;
  int max_call_depth = 200;         // nested macro calls
  int64_t max_range = 1 << 20;      // items of one range()
  int64_t max_steps = 100'000'000;  // statements executed
};

// Renders `body` with `variables` (a dict: messages, add_generation_prompt, ...). `now` is what
// strftime_now formats. Errors: InvalidArgument with payload kRaisedPayload for
// raise_exception(msg) (the message as given); InvalidArgument "line N: <Python error>" for
// evaluation errors (an undefined value used, a type error, an unsafe method, ...).
absl::StatusOr<std::string> Interpret(const Body& body, const Map& variables, const std::tm& now,
                                      const RenderLimits& limits = {});

}  // namespace tandem::jinja
