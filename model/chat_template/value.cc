#include "model/chat_template/value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"
#include "model/chat_template/pystr.h"

namespace tandem::jinja {

const Value* Map::Find(absl::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

Value* Map::Find(absl::string_view key) {
  for (auto& [k, v] : entries_) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

const Value* Map::FindKey(const Value& key) const {
  if (key.is_string()) return Find(key.str());
  for (const auto& [k, v] : entries_) {
    if (Equals(k, key)) return &v;
  }
  return nullptr;
}

void Map::Set(std::string key, Value value) {
  if (Value* v = Find(key)) {
    *v = std::move(value);
    return;
  }
  entries_.emplace_back(Value(std::move(key)), std::move(value));
}

void Map::SetKey(Value key, Value value) {
  for (auto& [k, v] : entries_) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

bool IsHashable(const Value& v) {
  if (v.is_map()) return false;
  if (!v.is_sequence()) return true;
  switch (v.seq().kind) {
    case SeqKind::kTuple:
      for (const Value& item : v.seq().items) {
        if (!IsHashable(item)) return false;
      }
      return true;
    case SeqKind::kGenerator:
    case SeqKind::kRange:
      return true;
    default:
      return false;
  }
}

Value Value::Seq(std::vector<Value> items, SeqKind kind) {
  auto s = std::make_shared<Sequence>();
  s->kind = kind;
  s->items = std::move(items);
  Value v;
  v.v_ = std::move(s);
  return v;
}

Value Value::Dict(Map map) {
  Value v;
  v.v_ = std::make_shared<Map>(std::move(map));
  return v;
}

Value Value::MakeObject(ObjectKind kind, Map attrs) {
  auto o = std::make_shared<Object>();
  o->kind = kind;
  o->attrs = std::move(attrs);
  Value v;
  v.v_ = std::move(o);
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  Value v;
  v.v_ = std::move(c);
  return v;
}

bool Value::SameObject(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kSequence:
      return &seq() == &other.seq();
    case Kind::kMap:
      return &map() == &other.map();
    case Kind::kObject:
      return &object() == &other.object();
    case Kind::kCallable:
      return &callable() == &other.callable();
    default:
      return false;
  }
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kSequence:
      // A generator object is always true; containers and views by their length.
      return v.seq().kind == SeqKind::kGenerator || !v.seq().items.empty();
    case Value::Kind::kMap:
      return v.map().size() > 0;
    case Value::Kind::kObject:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kSequence:
      switch (v.seq().kind) {
        case SeqKind::kList:
          return "list";
        case SeqKind::kTuple:
          return "tuple";
        case SeqKind::kGenerator:
          return "generator";
        case SeqKind::kDictItems:
          return "dict_items";
        case SeqKind::kDictKeys:
          return "dict_keys";
        case SeqKind::kDictValues:
          return "dict_values";
        case SeqKind::kRange:
          return "range";
      }
      return "sequence";
    case Value::Kind::kMap:
      return "dict";
    case Value::Kind::kObject:
      return v.object().kind == ObjectKind::kNamespace ? "Namespace" : "LoopContext";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  // sci: [-]D[.DDD]e(+|-)XX
  size_t i = 0;
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    i = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e; ++k) {
    if (sci[k] != '.') digits.push_back(sci[k]);
  }
  const int exp = std::atoi(sci.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = sign;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int aexp = exp < 0 ? -exp : exp;
  out += absl::StrCat("e", exp < 0 ? "-" : "+", aexp < 10 ? "0" : "", aexp);
  return out;
}

namespace {

// Python stops runaway recursion (RecursionError); so do printing and comparing here, for
// values a template nested too deeply.
constexpr int kMaxNesting = 1000;
thread_local int repr_depth = 0;
thread_local int equals_depth = 0;
struct NestingGuard {
  explicit NestingGuard(int* depth) : depth(depth) { ++*depth; }
  ~NestingGuard() { --*depth; }
  int* depth;
};

absl::Status NoRepr(const Value& v) {
  return absl::InvalidArgumentError(absl::StrCat("cannot print a ", TypeName(v),
                                                 " object (its Python text is not reproducible)"));
}

absl::StatusOr<std::string> JoinRepr(const std::vector<Value>& items, size_t from) {
  std::string out;
  for (size_t i = from; i < items.size(); ++i) {
    if (i > from) out += ", ";
    TANDEM_ASSIGN_OR_RETURN(const std::string r, Repr(items[i]));
    out += r;
  }
  return out;
}

absl::StatusOr<std::string> MapRepr(const Map& m) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : m.entries()) {
    if (!first) out += ", ";
    first = false;
    TANDEM_ASSIGN_OR_RETURN(const std::string kr, Repr(k));
    TANDEM_ASSIGN_OR_RETURN(const std::string r, Repr(v));
    absl::StrAppend(&out, kr, ": ", r);
  }
  out += "}";
  return out;
}

}  // namespace

absl::StatusOr<std::string> Repr(const Value& v) {
  const NestingGuard guard(&repr_depth);
  if (repr_depth > kMaxNesting) {
    return absl::InvalidArgumentError("RecursionError: value nested too deeply to print");
  }
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::string("Undefined");
    case Value::Kind::kString:
      return PyReprString(v.str());
    case Value::Kind::kSequence: {
      const Sequence& s = v.seq();
      switch (s.kind) {
        case SeqKind::kList: {
          TANDEM_ASSIGN_OR_RETURN(const std::string inner, JoinRepr(s.items, 0));
          return absl::StrCat("[", inner, "]");
        }
        case SeqKind::kTuple: {
          TANDEM_ASSIGN_OR_RETURN(const std::string inner, JoinRepr(s.items, 0));
          return absl::StrCat("(", inner, s.items.size() == 1 ? ",)" : ")");
        }
        case SeqKind::kDictItems:
        case SeqKind::kDictKeys:
        case SeqKind::kDictValues: {
          TANDEM_ASSIGN_OR_RETURN(const std::string inner, JoinRepr(s.items, 0));
          return absl::StrCat(TypeName(v), "([", inner, "])");
        }
        case SeqKind::kGenerator:
        case SeqKind::kRange:
          return NoRepr(v);
      }
      return NoRepr(v);
    }
    case Value::Kind::kMap:
      return MapRepr(v.map());
    case Value::Kind::kObject:
      if (v.object().kind == ObjectKind::kNamespace) {
        TANDEM_ASSIGN_OR_RETURN(const std::string inner, MapRepr(v.object().attrs));
        return absl::StrCat("<Namespace ", inner, ">");
      }
      return NoRepr(v);
    case Value::Kind::kCallable:
      return NoRepr(v);
    default:
      return ToStr(v);
  }
}

absl::StatusOr<std::string> ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::string();
    case Value::Kind::kNone:
      return std::string("None");
    case Value::Kind::kBool:
      return std::string(v.as_bool() ? "True" : "False");
    case Value::Kind::kInt:
      return absl::StrCat(v.as_int());
    case Value::Kind::kFloat:
      return FloatRepr(v.as_float());
    case Value::Kind::kString:
      return v.str();
    default:
      return Repr(v);
  }
}

bool Equals(const Value& a, const Value& b) {
  const NestingGuard guard(&equals_depth);
  if (equals_depth > kMaxNesting) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kSequence: {
      const Sequence& x = a.seq();
      const Sequence& y = b.seq();
      if (&x == &y) return true;
      if (x.kind != y.kind || x.kind == SeqKind::kGenerator) return false;
      if (x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kMap: {
      const Map& x = a.map();
      const Map& y = b.map();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* w = y.FindKey(k);
        if (w == nullptr || !Equals(v, *w)) return false;
      }
      return true;
    }
    default:
      return a.SameObject(b);
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list_like() && b.is_list_like() && a.seq().kind == b.seq().kind) {
    const auto& x = a.seq().items;
    const auto& y = b.seq().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: '<' not supported between instances of '", TypeName(a), "' and '",
                   TypeName(b), "'"));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kString: {
      // One item per character, bounded like any built list.
      const auto chars = DecodeUtf8(v.str());
      TANDEM_RETURN_IF_ERROR(CheckBuiltItems(chars.size()));
      std::vector<Value> out;
      out.reserve(chars.size());
      std::string ch;
      for (char32_t c : chars) {
        ch.clear();
        AppendUtf8(c, &ch);
        out.emplace_back(ch);
      }
      return out;
    }
    case Value::Kind::kSequence: {
      Sequence& s = v.seq();
      if (s.kind == SeqKind::kGenerator) {
        std::vector<Value> rest(s.items.begin() + static_cast<std::ptrdiff_t>(s.consumed),
                                s.items.end());
        s.consumed = s.items.size();
        return rest;
      }
      return s.items;
    }
    case Value::Kind::kMap: {
      std::vector<Value> keys;
      for (const auto& [k, unused] : v.map().entries()) keys.push_back(k);
      return keys;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("TypeError: '", TypeName(v), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return CodePointCount(v.str());
    case Value::Kind::kSequence:
      if (v.seq().kind == SeqKind::kGenerator) break;
      return static_cast<int64_t>(v.seq().items.size());
    case Value::Kind::kMap:
      return static_cast<int64_t>(v.map().size());
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("TypeError: object of type '", TypeName(v), "' has no len()"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TypeError: 'in <string>' requires string as left operand, not ", TypeName(item)));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kSequence: {
      Sequence& s = container.seq();
      const size_t from = s.kind == SeqKind::kGenerator ? s.consumed : 0;
      for (size_t i = from; i < s.items.size(); ++i) {
        if (Equals(s.items[i], item)) {
          if (s.kind == SeqKind::kGenerator) s.consumed = i + 1;
          return true;
        }
      }
      if (s.kind == SeqKind::kGenerator) s.consumed = s.items.size();
      return false;
    }
    case Value::Kind::kMap:
      if (!IsHashable(item)) {
        return absl::InvalidArgumentError(
            absl::StrCat("TypeError: unhashable type: '", TypeName(item), "'"));
      }
      return container.map().FindKey(item) != nullptr;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("TypeError: argument of type '", TypeName(container), "' is not iterable"));
  }
}

std::string HtmlEscape(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

absl::Status UndefinedError(const Value& v) {
  std::string msg = v.is_undefined() ? v.undefined_message() : "";
  if (msg.empty()) msg = "value is undefined";
  // An unsafe attribute (a mutating list/dict method) fails as the sandbox's SecurityError.
  if (msg.rfind("SecurityError: ", 0) == 0) return absl::InvalidArgumentError(msg);
  return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", msg));
}

}  // namespace tandem::jinja
