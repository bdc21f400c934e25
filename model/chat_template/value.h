// The values a chat template computes with, with Python's semantics as Jinja2 gives them: None,
// bool (an int in arithmetic), int (64-bit), float, str (UTF-8; lengths, indexes and slices count
// code points), list/tuple and the lazy sequences Jinja2's filters return (generators, dict
// views, ranges), dict (insertion-ordered, string keys), objects (namespace(), the loop variable)
// and callables (macros, globals, bound methods). Jinja2's Undefined is a value too: printed as
// nothing, iterated as empty, false, and an error for anything else.
//
// Lists, dicts and objects are shared by reference like Python's; a Value is cheap to copy.
// Not thread-safe: one render works on its own values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::jinja {

class Value;

// What a sequence is in Python, which decides how it prints, whether it has a length, whether
// json.dumps takes it and whether it can be iterated twice.
enum class SeqKind : uint8_t {
  kList,
  kTuple,
  kGenerator,  // map/select/... results, reversed(): one pass, no len, not JSON
  kDictItems,  // dict.items() / keys() / values(): len, repeatable, not JSON
  kDictKeys,
  kDictValues,
  kRange,  // range(): len, repeatable, not JSON
};

struct Sequence {
  SeqKind kind = SeqKind::kList;
  std::vector<Value> items;
  size_t consumed = 0;  // kGenerator: how many items earlier iterations took
};

// A dict in insertion order (small: linear lookups). Keys are hashable values (IsHashable),
// compared as Python compares them (1 == 1.0 == True); templates mostly use str keys.
class Map {
 public:
  const Value* Find(absl::string_view key) const;  // a str key
  Value* Find(absl::string_view key);
  const Value* FindKey(const Value& key) const;  // any key
  void Set(std::string key, Value value);        // replaces in place or appends
  void SetKey(Value key, Value value);
  const std::vector<std::pair<Value, Value>>& entries() const;
  size_t size() const;

 private:
  std::vector<std::pair<Value, Value>> entries_;
};

enum class ObjectKind : uint8_t { kNamespace, kLoop };

// namespace() and the loop variable: attributes only.
struct Object {
  ObjectKind kind = ObjectKind::kNamespace;
  Map attrs;
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFunction = std::function<absl::StatusOr<Value>(const CallArgs&)>;

struct Callable {
  std::string name;  // for messages
  NativeFunction fn;
};

struct UndefinedInfo {
  std::string message;  // Jinja2's: "'x' is undefined", "'dict object' has no attribute 'y'"
};
struct NoneTag {};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kSequence,
    kMap,
    kObject,
    kCallable,
  };

  Value() : v_(UndefinedInfo{}) {}              // undefined
  Value(bool b) : v_(b) {}                      // NOLINT(runtime/explicit): literals read naturally
  Value(int i) : v_(int64_t{i}) {}              // NOLINT
  Value(int64_t i) : v_(i) {}                   // NOLINT
  Value(double d) : v_(d) {}                    // NOLINT
  Value(std::string s) : v_(std::move(s)) {}    // NOLINT
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT
  Value(absl::string_view s) : v_(std::string(s)) {}  // NOLINT

  // A markupsafe.Markup string (what `safe` and `escape` return): adding a plain string to it,
  // or calling its str methods, HTML-escapes the plain operands, as Jinja2 does even with
  // autoescape off.
  static Value Markup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }

  static Value Undefined(std::string message = "") {
    Value v;
    v.v_ = UndefinedInfo{std::move(message)};
    return v;
  }
  static Value None() {
    Value v;
    v.v_ = NoneTag{};
    return v;
  }
  static Value Seq(std::vector<Value> items, SeqKind kind = SeqKind::kList);
  static Value Dict(Map map = {});
  static Value MakeObject(ObjectKind kind, Map attrs = {});
  static Value Function(std::string name, NativeFunction fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_integral() const { return is_bool() || is_int(); }  // Python int (bool included)
  bool is_string() const { return kind() == Kind::kString; }
  bool is_markup() const { return markup_ && is_string(); }
  bool is_sequence() const { return kind() == Kind::kSequence; }
  bool is_map() const { return kind() == Kind::kMap; }
  bool is_object() const { return kind() == Kind::kObject; }
  bool is_callable() const { return kind() == Kind::kCallable; }
  // A list or tuple (indexable, sliceable, printable as Python prints them).
  bool is_list_like() const {
    return is_sequence() && (seq().kind == SeqKind::kList || seq().kind == SeqKind::kTuple);
  }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  double as_float() const {
    return is_float() ? std::get<double>(v_) : static_cast<double>(as_int());
  }
  const std::string& str() const { return std::get<std::string>(v_); }
  Sequence& seq() const { return *std::get<std::shared_ptr<Sequence>>(v_); }
  Map& map() const { return *std::get<std::shared_ptr<Map>>(v_); }
  Object& object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  const std::string& undefined_message() const { return std::get<UndefinedInfo>(v_).message; }

  // Same list/dict/object/callable (Python `is` for containers).
  bool SameObject(const Value& other) const;

 private:
  std::variant<UndefinedInfo, NoneTag, bool, int64_t, double, std::string,
               std::shared_ptr<Sequence>, std::shared_ptr<Map>, std::shared_ptr<Object>,
               std::shared_ptr<Callable>>
      v_;
  bool markup_ = false;
};

// Defined here, where Value is complete.
inline const std::vector<std::pair<Value, Value>>& Map::entries() const { return entries_; }
inline size_t Map::size() const { return entries_.size(); }

// Whether Python can hash the value (be a dict key): not a list, dict or dict view.
bool IsHashable(const Value& v);

// Python's bool(value).
bool Truthy(const Value& v);

// Python's type name ("str", "dict", "NoneType", ...) for messages.
std::string TypeName(const Value& v);

// markupsafe's escape(): & < > ' " as HTML entities.
std::string HtmlEscape(absl::string_view s);

// Python's str(value) (Undefined prints as ""); an error for values without one Jinja2 would
// print reproducibly (callables, generators).
absl::StatusOr<std::string> ToStr(const Value& v);
// Python's repr(value).
absl::StatusOr<std::string> Repr(const Value& v);
// Python's repr(float): the shortest digits that round-trip, as Python lays them out.
std::string FloatRepr(double d);

// Python's ==.
bool Equals(const Value& a, const Value& b);
// Python's <: numbers, strings, lists/tuples; TypeError otherwise.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// The items `for x in v` visits (strings: their characters; dicts: their keys; Undefined:
// nothing; a generator: what is left of it, which it then no longer has).
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
// len(v); TypeError for values without one.
absl::StatusOr<int64_t> Length(const Value& v);

// Python's `a in b`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

// The error Jinja2 raises when an undefined value is used: "'x' is undefined".
absl::Status UndefinedError(const Value& v);

}  // namespace tandem::jinja
