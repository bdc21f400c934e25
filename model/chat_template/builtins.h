// What chat templates call besides the interpreter itself: Jinja2's filters and tests, the str,
// dict and list methods the sandbox lets templates use, attribute and item lookup with the
// sandbox's rules, Python's operators, and json.dumps as transformers' `tojson` calls it.
// Each is a small function in filters.cc, tests.cc, methods.cc, operators.cc or json.cc.
//
// Pure; thread-safe (no shared state).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/chat_template/interpreter.h"
#include "model/chat_template/value.h"

namespace tandem::jinja {

// ---- names the validator accepts ---------------------------------------------------------------
bool IsKnownFilter(absl::string_view name);
bool IsKnownTest(absl::string_view name);
bool IsKnownMethod(absl::string_view name);  // any type's
bool IsKnownGlobalFunction(absl::string_view name);
bool IsRefusedGlobal(absl::string_view name);  // Jinja2 globals Tandem does not implement

// ---- lookups -----------------------------------------------------------------------------------
// obj.name as Jinja2's sandboxed getattr: a method of str/dict/list as a bound callable (the
// mutating ones as the sandbox's unsafe Undefined), a dict key, a namespace attribute;
// Undefined when there is none; UndefinedError on an undefined obj.
absl::StatusOr<Value> GetAttr(const Value& obj, absl::string_view name);
// obj[key] as Jinja2's sandboxed getitem (falls back to GetAttr for a string key).
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] (None for an omitted bound).
absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                               const Value& step);

// ---- operators ---------------------------------------------------------------------------------
// MemoryError past the longest string (bytes) or list (items) a render may build
// (RenderLimits::max_built_bytes / max_built_items of the render running on this thread, see
// BuiltLimitsScope; kMaxBuiltSize / kMaxBuiltItems outside a render).
absl::Status CheckBuiltSize(size_t size);
absl::Status CheckBuiltItems(size_t items);

// Sets this thread's bounds for CheckBuiltSize / CheckBuiltItems for its lifetime (one render:
// the operators, methods and filters that check are free functions without the render's state).
class BuiltLimitsScope {
 public:
  BuiltLimitsScope(size_t max_bytes, size_t max_items);
  ~BuiltLimitsScope();
  BuiltLimitsScope(const BuiltLimitsScope&) = delete;
  BuiltLimitsScope& operator=(const BuiltLimitsScope&) = delete;

 private:
  size_t previous_bytes_, previous_items_;
};

// op in + - * / // % **
absl::StatusOr<Value> BinaryOp(absl::string_view op, const Value& a, const Value& b);
absl::StatusOr<Value> Negate(const Value& a);
absl::StatusOr<Value> UnaryPlus(const Value& a);
// Python's printf-style `fmt % args`.
absl::StatusOr<Value> PercentFormat(const Value& fmt, const Value& args);

// ---- filters, tests, methods -------------------------------------------------------------------
absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input, const CallArgs& args);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input, const CallArgs& args);
// self.name(args) for a method of self's type (`name` from IsKnownMethod).
absl::StatusOr<Value> CallMethod(const Value& self, absl::string_view name, const CallArgs& args);

// ---- json --------------------------------------------------------------------------------------
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(value, **options); TypeError for values JSON cannot hold (Undefined, generators,
// namespaces, ...), as Python's.
absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options);
// json.dumps of a string (the quoted, escaped literal).
std::string JsonQuote(absl::string_view s, bool ensure_ascii);

// ---- argument binding
// ----------------------------------------------------------------------------
struct Param {
  const char* name;
  std::optional<Value> fallback;  // nullopt: required
};
// Binds positional and keyword arguments to `params` as Python would for a function `what`;
// returns one value per param. TypeError for too many, unknown, duplicate or missing arguments.
absl::StatusOr<std::vector<Value>> BindArgs(absl::string_view what, const CallArgs& args,
                                            std::initializer_list<Param> params);

// The error the sandbox's TypeError/ValueError raise, as InvalidArgument "TypeError: ...".
absl::Status TypeError(absl::string_view message);

}  // namespace tandem::jinja
