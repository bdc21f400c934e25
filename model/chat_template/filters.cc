// Jinja2's built-in filters (jinja2/filters.py) that chat templates use, with transformers'
// `tojson` (json.dumps, ensure_ascii=False, no HTML escaping) in place of Jinja2's.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"
#include "model/chat_template/pystr.h"

namespace tandem::jinja {
namespace {

using FilterFn = absl::StatusOr<Value> (*)(const Value&, const CallArgs&);

// Jinja2's soft_str: strings (Markup included) as they are, anything else through str().
absl::StatusOr<Value> SoftStr(const Value& v) {
  if (v.is_string()) return v;
  TANDEM_ASSIGN_OR_RETURN(std::string s, ToStr(v));
  return Value(std::move(s));
}

Value SameKind(const Value& like, std::string s) {
  return like.is_markup() ? Value::Markup(std::move(s)) : Value(std::move(s));
}

// Jinja2's make_attrgetter: "a.b.0" looked up with getitem, integer parts as ints.
absl::StatusOr<Value> LookupPath(const Value& item, const Value& attribute) {
  if (attribute.is_none()) return item;
  Value cur = item;
  if (attribute.is_integral()) return GetItem(cur, attribute);
  TANDEM_ASSIGN_OR_RETURN(const std::string path, ToStr(attribute));
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    int64_t index;
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (digits && absl::SimpleAtoi(part, &index)) {
      TANDEM_ASSIGN_OR_RETURN(cur, GetItem(cur, Value(index)));
    } else {
      TANDEM_ASSIGN_OR_RETURN(cur, GetItem(cur, Value(part)));
    }
  }
  return cur;
}

Value IgnoreCase(const Value& v) { return v.is_string() ? Value(PyLower(v.str())) : v; }

// Python's sorted() with a key function (stable; reverse keeps equal items in order).
absl::Status SortBy(std::vector<Value>* items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    absl::StatusOr<bool> lt = reverse ? Less(keys[b], keys[a]) : Less(keys[a], keys[b]);
    if (!lt.ok()) {
      error = lt.status();
      return false;
    }
    return *lt;
  });
  TANDEM_RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  sorted.reserve(items->size());
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return absl::OkStatus();
}

absl::StatusOr<Value> Abs(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("abs", args, {}).status());
  if (v.is_integral()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  return TypeError(absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
}

absl::StatusOr<Value> Attr(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs("attr", args, {{"name", std::nullopt}}));
  TANDEM_ASSIGN_OR_RETURN(const std::string name, ToStr(a[0]));
  if (v.is_map() && !IsKnownMethod(name)) return Value::Undefined();
  return GetAttr(v, name);
}

absl::StatusOr<Value> Batch(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(
      const std::vector<Value> a,
      BindArgs("batch", args, {{"linecount", std::nullopt}, {"fill_with", Value::None()}}));
  if (!a[0].is_integral() || a[0].as_int() <= 0) return TypeError("batch: linecount must be > 0");
  TANDEM_RETURN_IF_ERROR(CheckBuiltSize(static_cast<size_t>(a[0].as_int())));
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  std::vector<Value> out, cur;
  for (const Value& item : items) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == a[0].as_int()) {
      out.push_back(Value::Seq(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!a[1].is_none()) {
      while (static_cast<int64_t>(cur.size()) < a[0].as_int()) cur.push_back(a[1]);
    }
    out.push_back(Value::Seq(std::move(cur)));
  }
  return Value::Seq(std::move(out), SeqKind::kGenerator);
}

absl::StatusOr<Value> StrCase(const Value& v, const CallArgs& args, absl::string_view method) {
  TANDEM_RETURN_IF_ERROR(BindArgs(method, args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(const Value s, SoftStr(v));
  return CallMethod(s, method, CallArgs{});
}
absl::StatusOr<Value> Capitalize(const Value& v, const CallArgs& args) {
  return StrCase(v, args, "capitalize");
}
absl::StatusOr<Value> Upper(const Value& v, const CallArgs& args) {
  return StrCase(v, args, "upper");
}
absl::StatusOr<Value> Lower(const Value& v, const CallArgs& args) {
  return StrCase(v, args, "lower");
}

absl::StatusOr<Value> Center(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a, BindArgs("center", args, {{"width", 80}}));
  TANDEM_ASSIGN_OR_RETURN(const Value s, SoftStr(v));
  CallArgs call;
  call.args.push_back(a[0]);
  return CallMethod(s, "center", call);
}

absl::StatusOr<Value> LengthFilter(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("length", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(const int64_t n, Length(v));
  return Value(n);
}

absl::StatusOr<Value> Default(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(
      const std::vector<Value> a,
      BindArgs("default", args, {{"default_value", Value("")}, {"boolean", false}}));
  if (v.is_undefined() || (Truthy(a[1]) && !Truthy(v))) return a[0];
  return v;
}

absl::StatusOr<Value> DictSort(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(
      const std::vector<Value> a,
      BindArgs("dictsort", args,
               {{"case_sensitive", false}, {"by", Value("key")}, {"reverse", false}}));
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_map()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AttributeError: '", TypeName(v), "' object has no attribute 'items'"));
  }
  int pos;
  if (a[1].is_string() && a[1].str() == "key") {
    pos = 0;
  } else if (a[1].is_string() && a[1].str() == "value") {
    pos = 1;
  } else {
    return absl::InvalidArgumentError(
        "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.map().entries()) {
    items.push_back(Value::Seq({k, val}, SeqKind::kTuple));
    const Value key = pos == 0 ? k : val;
    keys.push_back(Truthy(a[0]) ? key : IgnoreCase(key));
  }
  TANDEM_RETURN_IF_ERROR(SortBy(&items, keys, Truthy(a[2])));
  return Value::Seq(std::move(items));
}

absl::StatusOr<Value> Escape(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("escape", args, {}).status());
  if (v.is_markup()) return v;
  TANDEM_ASSIGN_OR_RETURN(const std::string s, ToStr(v));
  return Value::Markup(HtmlEscape(s));
}

absl::StatusOr<Value> First(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("first", args, {}).status());
  if (v.is_sequence() && v.seq().kind == SeqKind::kGenerator) {
    Sequence& s = v.seq();
    if (s.consumed >= s.items.size()) return Value::Undefined("No first item, sequence was empty.");
    return s.items[s.consumed++];
  }
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

absl::StatusOr<Value> Last(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("last", args, {}).status());
  if (v.is_sequence() && v.seq().kind == SeqKind::kGenerator) {
    return TypeError("'generator' object is not reversible");
  }
  if (!v.is_undefined() && !v.is_string() && !v.is_sequence() && !v.is_map()) {
    return TypeError(absl::StrCat("'", TypeName(v), "' object is not reversible"));
  }
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

// Python's float(str): decimal literal with optional surrounding whitespace.
std::optional<double> ParseFloat(const std::string& text) {
  const std::string s = PyStrip(text, nullptr, true, true);
  if (s.empty()) return std::nullopt;
  std::string clean;
  for (char c : s) {
    if (c != '_') clean.push_back(c);
  }
  const std::string lower = PyLower(clean);
  const size_t sign = (lower[0] == '+' || lower[0] == '-') ? 1 : 0;
  const std::string rest = lower.substr(sign);
  if (rest == "inf" || rest == "infinity" || rest == "nan") {
    const double d = rest == "nan" ? std::nan("") : INFINITY;
    return lower[0] == '-' ? -d : d;
  }
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  for (char c : rest) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == '+' || c == '-')) {
      return std::nullopt;
    }
  }
  return d;
}

absl::StatusOr<Value> Float(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a, BindArgs("float", args, {{"default", 0.0}}));
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    if (const auto d = ParseFloat(v.str())) return Value(*d);
  }
  return a[0];
}

absl::StatusOr<Value> Format(const Value& v, const CallArgs& args) {
  if (!args.args.empty() && !args.kwargs.empty()) {
    return absl::InvalidArgumentError(
        "FilterArgumentError: can't handle positional and keyword arguments at the same time");
  }
  TANDEM_ASSIGN_OR_RETURN(const Value s, SoftStr(v));
  if (!args.kwargs.empty()) {
    Map m;
    for (const auto& [k, val] : args.kwargs) m.Set(k, val);
    return PercentFormat(s, Value::Dict(std::move(m)));
  }
  return PercentFormat(s, Value::Seq(args.args, SeqKind::kTuple));
}

absl::StatusOr<Value> Indent(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(
      const std::vector<Value> a,
      BindArgs("indent", args, {{"width", 4}, {"first", false}, {"blank", false}}));
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_string())
    return TypeError(
        absl::StrCat("unsupported operand type(s) for +=: '", TypeName(v), "' and 'str'"));
  std::string indention;
  if (a[0].is_string()) {
    indention = a[0].str();
  } else if (a[0].is_integral()) {
    TANDEM_RETURN_IF_ERROR(
        CheckBuiltSize(static_cast<size_t>(std::max<int64_t>(0, a[0].as_int()))));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(0, a[0].as_int())), ' ');
  } else {
    return TypeError("indent width must be an int or a str");
  }
  const std::vector<std::string> lines = PySplitLines(v.str() + "\n", false);
  std::string rv;
  if (Truthy(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (Truthy(a[1])) rv = indention + rv;
  return SameKind(v, std::move(rv));
}

// Python's int(str, base) for base 10 (and 0/2/8/16 with prefixes).
std::optional<int64_t> ParseInt(const std::string& text, int64_t base) {
  std::string s = PyStrip(text, nullptr, true, true);
  std::string clean;
  for (char c : s) {
    if (c != '_') clean.push_back(c);
  }
  if (clean.empty()) return std::nullopt;
  size_t i = 0;
  bool neg = false;
  if (clean[0] == '+' || clean[0] == '-') {
    neg = clean[0] == '-';
    i = 1;
  }
  std::string lower = PyLower(clean.substr(i));
  if ((base == 16 || base == 0) && lower.rfind("0x", 0) == 0) {
    base = 16;
    lower = lower.substr(2);
  } else if ((base == 8 || base == 0) && lower.rfind("0o", 0) == 0) {
    base = 8;
    lower = lower.substr(2);
  } else if ((base == 2 || base == 0) && lower.rfind("0b", 0) == 0) {
    base = 2;
    lower = lower.substr(2);
  } else if (base == 0) {
    base = 10;
  }
  if (lower.empty()) return std::nullopt;
  int64_t out = 0;
  for (char c : lower) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(out, base, &out) || __builtin_add_overflow(out, d, &out)) {
      return std::nullopt;
    }
  }
  return neg ? -out : out;
}

absl::StatusOr<Value> Int(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs("int", args, {{"default", 0}, {"base", 10}}));
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_integral()) return Value(v.as_int());
  if (v.is_float()) {
    if (std::isnan(v.as_float()) || std::isinf(v.as_float())) return a[0];
    return Value(static_cast<int64_t>(v.as_float()));
  }
  if (v.is_string()) {
    if (const auto i = ParseInt(v.str(), a[1].is_integral() ? a[1].as_int() : 10)) return Value(*i);
    if (const auto d = ParseFloat(v.str()); d && std::isfinite(*d)) {
      return Value(static_cast<int64_t>(*d));
    }
  }
  return a[0];
}

absl::StatusOr<Value> Join(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs("join", args, {{"d", Value("")}, {"attribute", Value::None()}}));
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  TANDEM_ASSIGN_OR_RETURN(const std::string sep, ToStr(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    TANDEM_ASSIGN_OR_RETURN(const Value item, LookupPath(items[i], a[1]));
    TANDEM_ASSIGN_OR_RETURN(const std::string s, ToStr(item));
    TANDEM_RETURN_IF_ERROR(CheckBuiltSize(out.size() + s.size()));
    out += s;
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> List(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("list", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  return Value::Seq(std::move(items));
}

absl::StatusOr<Value> Items(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("items", args, {}).status());
  if (v.is_undefined()) return Value::Seq({}, SeqKind::kGenerator);
  if (!v.is_map()) return TypeError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.map().entries()) {
    out.push_back(Value::Seq({k, val}, SeqKind::kTuple));
  }
  return Value::Seq(std::move(out), SeqKind::kGenerator);
}

absl::StatusOr<Value> MapFilter(const Value& v, const CallArgs& args) {
  std::vector<Value> out;
  if (!Truthy(v)) return Value::Seq(std::move(out), SeqKind::kGenerator);
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  if (args.args.empty()) {
    Value attribute, fallback = Value::None();
    bool have_attribute = false;
    for (const auto& [k, val] : args.kwargs) {
      if (k == "attribute") {
        attribute = val;
        have_attribute = true;
      } else if (k == "default") {
        fallback = val;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("FilterArgumentError: Unexpected keyword argument '", k, "'"));
      }
    }
    if (!have_attribute) {
      return absl::InvalidArgumentError("FilterArgumentError: map requires a filter argument");
    }
    for (const Value& item : items) {
      TANDEM_ASSIGN_OR_RETURN(Value got, LookupPath(item, attribute));
      if (got.is_undefined() && !fallback.is_none()) got = fallback;
      out.push_back(std::move(got));
    }
    return Value::Seq(std::move(out), SeqKind::kGenerator);
  }
  if (!args.args[0].is_string()) return TypeError("map: the filter name must be a string");
  const std::string name = args.args[0].str();
  if (!IsKnownFilter(name)) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", name, "' in map()"));
  }
  CallArgs rest;
  rest.args.assign(args.args.begin() + 1, args.args.end());
  rest.kwargs = args.kwargs;
  for (const Value& item : items) {
    TANDEM_ASSIGN_OR_RETURN(Value got, ApplyFilter(name, item, rest));
    out.push_back(std::move(got));
  }
  return Value::Seq(std::move(out), SeqKind::kGenerator);
}

absl::StatusOr<Value> SelectOrReject(const Value& v, const CallArgs& args, bool select,
                                     bool lookup_attr) {
  std::vector<Value> out;
  if (!Truthy(v)) return Value::Seq(std::move(out), SeqKind::kGenerator);
  size_t off = 0;
  Value attribute = Value::None();
  if (lookup_attr) {
    if (args.args.empty()) {
      return absl::InvalidArgumentError(
          "FilterArgumentError: Missing parameter for attribute name");
    }
    attribute = args.args[0];
    off = 1;
  }
  const bool have_test = args.args.size() > off;
  std::string test;
  CallArgs rest;
  if (have_test) {
    if (!args.args[off].is_string()) return TypeError("the test name must be a string");
    test = args.args[off].str();
    if (!IsKnownTest(test)) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported test '", test, "'"));
    }
    rest.args.assign(args.args.begin() + static_cast<std::ptrdiff_t>(off) + 1, args.args.end());
    rest.kwargs = args.kwargs;
  }
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  for (const Value& item : items) {
    TANDEM_ASSIGN_OR_RETURN(const Value subject, lookup_attr ? LookupPath(item, attribute)
                                                             : absl::StatusOr<Value>(item));
    bool pass;
    if (have_test) {
      TANDEM_ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, rest));
    } else {
      pass = Truthy(subject);
    }
    if (pass == select) out.push_back(item);
  }
  return Value::Seq(std::move(out), SeqKind::kGenerator);
}
absl::StatusOr<Value> Select(const Value& v, const CallArgs& args) {
  return SelectOrReject(v, args, true, false);
}
absl::StatusOr<Value> Reject(const Value& v, const CallArgs& args) {
  return SelectOrReject(v, args, false, false);
}
absl::StatusOr<Value> SelectAttr(const Value& v, const CallArgs& args) {
  return SelectOrReject(v, args, true, true);
}
absl::StatusOr<Value> RejectAttr(const Value& v, const CallArgs& args) {
  return SelectOrReject(v, args, false, true);
}

absl::StatusOr<Value> MinMax(const Value& v, const CallArgs& args, bool max) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs(max ? "max" : "min", args,
                                   {{"case_sensitive", false}, {"attribute", Value::None()}}));
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(Value key, LookupPath(items[i], a[1]));
    if (!Truthy(a[0])) key = IgnoreCase(key);
    if (i == 0) {
      best_key = key;
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(const bool better, max ? Less(best_key, key) : Less(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}
absl::StatusOr<Value> Min(const Value& v, const CallArgs& args) { return MinMax(v, args, false); }
absl::StatusOr<Value> Max(const Value& v, const CallArgs& args) { return MinMax(v, args, true); }

absl::StatusOr<Value> Replace(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(
      const std::vector<Value> a,
      BindArgs("replace", args,
               {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::None()}}));
  TANDEM_ASSIGN_OR_RETURN(const std::string s, ToStr(v));
  TANDEM_ASSIGN_OR_RETURN(const std::string old, ToStr(a[0]));
  TANDEM_ASSIGN_OR_RETURN(const std::string repl, ToStr(a[1]));
  if (!a[2].is_none() && !a[2].is_integral()) return TypeError("count must be an integer");
  if (repl.size() > old.size()) {
    TANDEM_RETURN_IF_ERROR(
        CheckBuiltSize(s.size() + static_cast<size_t>(PyCount(s, old)) * repl.size()));
  }
  return Value(PyReplace(s, old, repl, a[2].is_none() ? -1 : a[2].as_int()));
}

absl::StatusOr<Value> Reverse(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("reverse", args, {}).status());
  if (v.is_string()) {
    std::u32string cps = DecodeUtf8(v.str());
    std::reverse(cps.begin(), cps.end());
    return SameKind(v, EncodeUtf8(cps));
  }
  const bool generator = v.is_sequence() && v.seq().kind == SeqKind::kGenerator;
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  std::reverse(items.begin(), items.end());
  // reversed() gives an iterator; a generator is turned into a reversed list instead.
  return Value::Seq(std::move(items), generator ? SeqKind::kList : SeqKind::kGenerator);
}

absl::StatusOr<Value> Round(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs("round", args, {{"precision", 0}, {"method", Value("common")}}));
  if (!a[1].is_string() ||
      (a[1].str() != "common" && a[1].str() != "ceil" && a[1].str() != "floor")) {
    return absl::InvalidArgumentError("FilterArgumentError: method must be common, ceil or floor");
  }
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_number())
    return TypeError(absl::StrCat("type ", TypeName(v), " doesn't define __round__ method"));
  if (!a[0].is_integral()) return TypeError("precision must be an integer");
  const double scale = std::pow(10.0, static_cast<double>(a[0].as_int()));
  if (a[1].str() == "common") {
    if (v.is_integral()) return Value(v.as_int());
    return Value(std::nearbyint(v.as_float() * scale) / scale);
  }
  const double x = v.as_float() * scale;
  return Value((a[1].str() == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

absl::StatusOr<Value> Safe(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("safe", args, {}).status());
  if (v.is_string()) return Value::Markup(v.str());
  TANDEM_ASSIGN_OR_RETURN(std::string s, ToStr(v));
  return Value::Markup(std::move(s));
}

absl::StatusOr<Value> Sort(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(
      const std::vector<Value> a,
      BindArgs("sort", args,
               {{"reverse", false}, {"case_sensitive", false}, {"attribute", Value::None()}}));
  TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
  std::vector<Value> attrs;
  if (a[2].is_string() && a[2].str().find(',') != std::string::npos) {
    for (absl::string_view part : absl::StrSplit(a[2].str(), ',')) attrs.emplace_back(part);
  }
  std::vector<Value> keys;
  for (const Value& item : items) {
    if (attrs.empty()) {
      TANDEM_ASSIGN_OR_RETURN(Value key, LookupPath(item, a[2]));
      keys.push_back(Truthy(a[1]) ? key : IgnoreCase(key));
    } else {
      std::vector<Value> parts;
      for (const Value& attr : attrs) {
        TANDEM_ASSIGN_OR_RETURN(Value key, LookupPath(item, attr));
        parts.push_back(Truthy(a[1]) ? key : IgnoreCase(key));
      }
      keys.push_back(Value::Seq(std::move(parts)));
    }
  }
  TANDEM_RETURN_IF_ERROR(SortBy(&items, keys, Truthy(a[0])));
  return Value::Seq(std::move(items));
}

absl::StatusOr<Value> String(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("string", args, {}).status());
  return SoftStr(v);
}

absl::StatusOr<Value> Sum(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs("sum", args, {{"attribute", Value::None()}, {"start", 0}}));
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  Value total = a[1];
  for (const Value& item : items) {
    TANDEM_ASSIGN_OR_RETURN(const Value x, LookupPath(item, a[0]));
    if (x.is_string()) return TypeError("unsupported operand type(s) for +: 'int' and 'str'");
    TANDEM_ASSIGN_OR_RETURN(total, BinaryOp("+", total, x));
  }
  return total;
}

absl::StatusOr<Value> Title(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("title", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(const Value s, SoftStr(v));
  // Jinja2's do_title: words start after runs of -, whitespace, (, {, [ or <.
  const std::u32string cps = DecodeUtf8(s.str());
  std::string out;
  bool at_start = true;
  for (char32_t c : cps) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
    if (sep) {
      AppendUtf8(c, &out);
      at_start = true;
    } else {
      if (at_start && c == 0xDF) {
        out += "Ss";
      } else {
        AppendUtf8(at_start ? ToUpper(c) : ToLower(c), &out);
      }
      at_start = false;
    }
  }
  return Value(std::move(out));
}

absl::StatusOr<Value> ToJsonFilter(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a, BindArgs("tojson", args,
                                                               {{"ensure_ascii", false},
                                                                {"indent", Value::None()},
                                                                {"separators", Value::None()},
                                                                {"sort_keys", false}}));
  JsonOptions o;
  o.ensure_ascii = Truthy(a[0]);
  o.sort_keys = Truthy(a[3]);
  if (a[1].is_integral()) {
    TANDEM_RETURN_IF_ERROR(
        CheckBuiltSize(static_cast<size_t>(std::max<int64_t>(0, a[1].as_int()))));
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, a[1].as_int())), ' ');
  } else if (a[1].is_string()) {
    o.indent = a[1].str();
  } else if (!a[1].is_none()) {
    return TypeError("tojson: indent must be None, an int or a str");
  }
  if (o.indent.has_value()) o.item_separator.assign(1, ',');  // json.dumps with indent
  if (!a[2].is_none()) {
    if (!a[2].is_list_like() || a[2].seq().items.size() != 2 || !a[2].seq().items[0].is_string() ||
        !a[2].seq().items[1].is_string()) {
      return TypeError("tojson: separators must be a pair of strings");
    }
    o.item_separator = a[2].seq().items[0].str();
    o.key_separator = a[2].seq().items[1].str();
  }
  TANDEM_ASSIGN_OR_RETURN(std::string json, ToJson(v, o));
  return Value(std::move(json));
}

absl::StatusOr<Value> Trim(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs("trim", args, {{"chars", Value::None()}}));
  TANDEM_ASSIGN_OR_RETURN(const Value s, SoftStr(v));
  CallArgs call;
  call.args.push_back(a[0]);
  return CallMethod(s, "strip", call);
}

absl::StatusOr<Value> Unique(const Value& v, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(
      const std::vector<Value> a,
      BindArgs("unique", args, {{"case_sensitive", false}, {"attribute", Value::None()}}));
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
  std::vector<Value> out, seen;
  for (const Value& item : items) {
    TANDEM_ASSIGN_OR_RETURN(Value key, LookupPath(item, a[1]));
    if (!Truthy(a[0])) key = IgnoreCase(key);
    if (key.is_map() || (key.is_sequence() && key.seq().kind == SeqKind::kList)) {
      return TypeError(absl::StrCat("unhashable type: '", TypeName(key), "'"));
    }
    bool dup = false;
    for (const Value& s : seen) dup = dup || Equals(s, key);
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::Seq(std::move(out), SeqKind::kGenerator);
}

absl::StatusOr<Value> WordCount(const Value& v, const CallArgs& args) {
  TANDEM_RETURN_IF_ERROR(BindArgs("wordcount", args, {}).status());
  TANDEM_ASSIGN_OR_RETURN(const Value s, SoftStr(v));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(s.str())) {
    const bool w = IsPyAlpha(c) || IsPyDigit(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

const absl::flat_hash_map<absl::string_view, FilterFn>& Filters() {
  static const auto* m = new absl::flat_hash_map<absl::string_view, FilterFn>{
      {"abs", Abs},
      {"attr", Attr},
      {"batch", Batch},
      {"capitalize", Capitalize},
      {"center", Center},
      {"count", LengthFilter},
      {"d", Default},
      {"default", Default},
      {"dictsort", DictSort},
      {"e", Escape},
      {"escape", Escape},
      {"first", First},
      {"float", Float},
      {"format", Format},
      {"indent", Indent},
      {"int", Int},
      {"items", Items},
      {"join", Join},
      {"last", Last},
      {"length", LengthFilter},
      {"list", List},
      {"lower", Lower},
      {"map", MapFilter},
      {"max", Max},
      {"min", Min},
      {"reject", Reject},
      {"rejectattr", RejectAttr},
      {"replace", Replace},
      {"reverse", Reverse},
      {"round", Round},
      {"safe", Safe},
      {"select", Select},
      {"selectattr", SelectAttr},
      {"sort", Sort},
      {"string", String},
      {"sum", Sum},
      {"title", Title},
      {"tojson", ToJsonFilter},
      {"trim", Trim},
      {"unique", Unique},
      {"upper", Upper},
      {"wordcount", WordCount},
  };
  return *m;
}

}  // namespace

bool IsKnownFilter(absl::string_view name) { return Filters().contains(name); }

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input,
                                  const CallArgs& args) {
  const auto it = Filters().find(name);
  if (it == Filters().end()) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", name, "'"));
  }
  return it->second(input, args);
}

}  // namespace tandem::jinja
