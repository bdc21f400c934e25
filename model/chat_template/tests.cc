// Jinja2's built-in tests (jinja2/tests.py): `x is defined`, `x is string`, `x is equalto y`, ...
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"
#include "model/chat_template/pystr.h"

namespace tandem::jinja {
namespace {

using TestFn = absl::StatusOr<bool> (*)(const Value&, const CallArgs&);

absl::Status NoArgs(absl::string_view name, const CallArgs& args) {
  return BindArgs(name, args, {}).status();
}

absl::StatusOr<Value> OneArg(absl::string_view name, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs(name, args, {{"other", std::nullopt}}));
  return a[0];
}

#define TANDEM_SIMPLE_TEST(fn, name, expr)                        \
  absl::StatusOr<bool> fn(const Value& v, const CallArgs& args) { \
    TANDEM_RETURN_IF_ERROR(NoArgs(name, args));                   \
    return (expr);                                                \
  }

TANDEM_SIMPLE_TEST(Defined, "defined", !v.is_undefined())
TANDEM_SIMPLE_TEST(Undefined, "undefined", v.is_undefined())
TANDEM_SIMPLE_TEST(None, "none", v.is_none())
TANDEM_SIMPLE_TEST(Boolean, "boolean", v.is_bool())
TANDEM_SIMPLE_TEST(False, "false", v.is_bool() && !v.as_bool())
TANDEM_SIMPLE_TEST(True, "true", v.is_bool() && v.as_bool())
TANDEM_SIMPLE_TEST(Integer, "integer", v.is_int())
TANDEM_SIMPLE_TEST(Float, "float", v.is_float())
TANDEM_SIMPLE_TEST(Number, "number", v.is_number())
TANDEM_SIMPLE_TEST(String, "string", v.is_string())
TANDEM_SIMPLE_TEST(Mapping, "mapping", v.is_map())
TANDEM_SIMPLE_TEST(Escaped, "escaped", v.is_markup())
// callable(): functions, macros, bound methods, and Undefined (it defines __call__).
TANDEM_SIMPLE_TEST(Callable, "callable", v.is_callable() || v.is_undefined())
// len() and __getitem__: str, list, tuple, range, dict, and Undefined.
TANDEM_SIMPLE_TEST(SequenceTest, "sequence",
                   v.is_string() || v.is_map() || v.is_undefined() ||
                       (v.is_sequence() &&
                        (v.seq().kind == SeqKind::kList || v.seq().kind == SeqKind::kTuple ||
                         v.seq().kind == SeqKind::kRange)))
TANDEM_SIMPLE_TEST(Iterable, "iterable",
                   v.is_string() || v.is_map() || v.is_undefined() || v.is_sequence() ||
                       (v.is_object() && v.object().kind == ObjectKind::kLoop))

#undef TANDEM_SIMPLE_TEST

absl::StatusOr<bool> Odd(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(NoArgs("odd", args));
  TANDEM_ASSIGN_OR_RETURN(const Value m, BinaryOp("%", v, Value(2)));
  return Equals(m, Value(1));
}

absl::StatusOr<bool> Even(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(NoArgs("even", args));
  TANDEM_ASSIGN_OR_RETURN(const Value m, BinaryOp("%", v, Value(2)));
  return Equals(m, Value(0));
}

absl::StatusOr<bool> DivisibleBy(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs("divisibleby", args, {{"num", std::nullopt}}));
  TANDEM_ASSIGN_OR_RETURN(const Value m, BinaryOp("%", v, a[0]));
  return Equals(m, Value(0));
}

absl::StatusOr<bool> Lower(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(NoArgs("lower", args));
  TANDEM_ASSIGN_OR_RETURN(const std::string s, ToStr(v));
  TANDEM_ASSIGN_OR_RETURN(const Value r, CallMethod(Value(s), "islower", CallArgs{}));
  return Truthy(r);
}

absl::StatusOr<bool> Upper(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(NoArgs("upper", args));
  TANDEM_ASSIGN_OR_RETURN(const std::string s, ToStr(v));
  TANDEM_ASSIGN_OR_RETURN(const Value r, CallMethod(Value(s), "isupper", CallArgs{}));
  return Truthy(r);
}

absl::StatusOr<bool> SameAs(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const Value other, OneArg("sameas", args));
  if (v.is_none() || other.is_none()) return v.is_none() && other.is_none();
  if (v.is_bool() || other.is_bool()) {
    return v.is_bool() && other.is_bool() && v.as_bool() == other.as_bool();
  }
  // CPython caches small ints, so `1 is 1`.
  if (v.is_int() && other.is_int()) {
    return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
  }
  return v.SameObject(other);
}

absl::StatusOr<bool> In(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs("in", args, {{"seq", std::nullopt}}));
  return Contains(a[0], v);
}

absl::StatusOr<bool> Eq(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const Value other, OneArg("eq", args));
  return Equals(v, other);
}
absl::StatusOr<bool> Ne(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const Value other, OneArg("ne", args));
  return !Equals(v, other);
}
absl::StatusOr<bool> Lt(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const Value other, OneArg("lt", args));
  return Less(v, other);
}
absl::StatusOr<bool> Gt(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const Value other, OneArg("gt", args));
  return Less(other, v);
}
absl::StatusOr<bool> Le(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const Value other, OneArg("le", args));
  TANDEM_ASSIGN_OR_RETURN(const bool gt, Less(other, v));
  return !gt;
}
absl::StatusOr<bool> Ge(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const Value other, OneArg("ge", args));
  TANDEM_ASSIGN_OR_RETURN(const bool lt, Less(v, other));
  return !lt;
}

absl::StatusOr<bool> FilterTest(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(NoArgs("filter", args));
  return v.is_string() && IsKnownFilter(v.str());
}

absl::StatusOr<bool> TestTest(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(NoArgs("test", args));
  return v.is_string() && IsKnownTest(v.str());
}

const absl::flat_hash_map<absl::string_view, TestFn>& Tests() {
  static const auto* m = new absl::flat_hash_map<absl::string_view, TestFn>{
      {"odd", Odd},
      {"even", Even},
      {"divisibleby", DivisibleBy},
      {"defined", Defined},
      {"undefined", Undefined},
      {"filter", FilterTest},
      {"test", TestTest},
      {"none", None},
      {"boolean", Boolean},
      {"false", False},
      {"true", True},
      {"integer", Integer},
      {"float", Float},
      {"lower", Lower},
      {"upper", Upper},
      {"string", String},
      {"mapping", Mapping},
      {"number", Number},
      {"sequence", SequenceTest},
      {"iterable", Iterable},
      {"callable", Callable},
      {"sameas", SameAs},
      {"escaped", Escaped},
      {"in", In},
      {"==", Eq},
      {"eq", Eq},
      {"equalto", Eq},
      {"!=", Ne},
      {"ne", Ne},
      {">", Gt},
      {"gt", Gt},
      {"greaterthan", Gt},
      {">=", Ge},
      {"ge", Ge},
      {"<", Lt},
      {"lt", Lt},
      {"lessthan", Lt},
      {"<=", Le},
      {"le", Le},
  };
  return *m;
}

}  // namespace

bool IsKnownTest(absl::string_view name) { return Tests().contains(name); }

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input, const CallArgs& args) {
  const auto it = Tests().find(name);
  if (it == Tests().end()) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported test '", name, "'"));
  }
  return it->second(input, args);
}

}  // namespace tandem::jinja
