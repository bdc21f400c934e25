// Lookups (getattr/getitem/slices with the sandbox's rules), Python's arithmetic operators,
// printf-style formatting and argument binding.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"
#include "model/chat_template/pystr.h"

namespace tandem::jinja {
namespace {

const absl::flat_hash_set<absl::string_view>& StrMethods() {
  static const auto* m = new absl::flat_hash_set<absl::string_view>{
      "capitalize", "center",  "count",      "endswith",     "find",        "format",
      "index",      "isalnum", "isalpha",    "isdigit",      "islower",     "isspace",
      "isupper",    "join",    "ljust",      "lower",        "lstrip",      "partition",
      "replace",    "rfind",   "rindex",     "rjust",        "rpartition",  "rsplit",
      "rstrip",     "split",   "splitlines", "startswith",   "strip",       "swapcase",
      "title",      "upper",   "zfill",      "removeprefix", "removesuffix"};
  return *m;
}
const absl::flat_hash_set<absl::string_view>& DictMethods() {
  static const auto* m =
      new absl::flat_hash_set<absl::string_view>{"get", "items", "keys", "values", "copy"};
  return *m;
}
const absl::flat_hash_set<absl::string_view>& DictMutators() {
  static const auto* m =
      new absl::flat_hash_set<absl::string_view>{"clear", "pop", "popitem", "setdefault", "update"};
  return *m;
}
const absl::flat_hash_set<absl::string_view>& ListMethods() {
  static const auto* m = new absl::flat_hash_set<absl::string_view>{"count", "index", "copy"};
  return *m;
}
const absl::flat_hash_set<absl::string_view>& ListMutators() {
  static const auto* m = new absl::flat_hash_set<absl::string_view>{
      "append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
  return *m;
}

Value BoundMethod(const Value& self, absl::string_view name) {
  const std::string n(name);
  return Value::Function(absl::StrCat(TypeName(self), ".", name),
                         [self, n](const CallArgs& args) { return CallMethod(self, n, args); });
}

Value Unsafe(const Value& obj, absl::string_view name) {
  return Value::Undefined(absl::StrCat("SecurityError: access to attribute '", name, "' of '",
                                       TypeName(obj), "' object is unsafe."));
}

Value NoAttribute(const Value& obj, absl::string_view name) {
  return Value::Undefined(
      absl::StrCat("'", TypeName(obj), " object' has no attribute '", name, "'"));
}

// Python's index normalisation: nullopt when out of range.
std::optional<int64_t> NormalizeIndex(int64_t i, int64_t n) {
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  return i;
}

absl::Status Overflow() {
  return absl::InvalidArgumentError(
      "OverflowError: integer out of the 64-bit range (Python's ints are unbounded)");
}

absl::Status ZeroDivision() {
  return absl::InvalidArgumentError("ZeroDivisionError: division by zero");
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.is_string() ? seq.str().size() : seq.seq().items.size();
  if (n > 0 && unit > 0) {
    const size_t total = unit * std::min<uint64_t>(n, kMaxBuiltSize + 1);
    TANDEM_RETURN_IF_ERROR(seq.is_string() ? CheckBuiltSize(total) : CheckBuiltItems(total));
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return seq.is_markup() ? Value::Markup(std::move(out)) : Value(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) {
    out.insert(out.end(), seq.seq().items.begin(), seq.seq().items.end());
  }
  return Value::Seq(std::move(out), seq.seq().kind);
}

double PyFloorMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// This thread's bounds (BuiltLimitsScope).
thread_local size_t max_built_bytes = kMaxBuiltSize;
thread_local size_t max_built_items = kMaxBuiltItems;
}  // namespace

BuiltLimitsScope::BuiltLimitsScope(size_t max_bytes, size_t max_items)
    : previous_bytes_(max_built_bytes), previous_items_(max_built_items) {
  max_built_bytes = std::min(max_bytes, kMaxBuiltSize);
  max_built_items = std::min(max_items, kMaxBuiltSize);
}

BuiltLimitsScope::~BuiltLimitsScope() {
  max_built_bytes = previous_bytes_;
  max_built_items = previous_items_;
}

absl::Status CheckBuiltSize(size_t size) {
  if (size <= max_built_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("MemoryError: a value of ", size, " bytes (at most ", max_built_bytes, ")"));
}

absl::Status CheckBuiltItems(size_t items) {
  if (items <= max_built_items) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("MemoryError: a list of ", items, " items (at most ", max_built_items, ")"));
}

absl::Status TypeError(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("TypeError: ", message));
}

bool IsKnownMethod(absl::string_view name) {
  return StrMethods().contains(name) || DictMethods().contains(name) ||
         DictMutators().contains(name) || ListMethods().contains(name) ||
         ListMutators().contains(name);
}

absl::StatusOr<Value> GetAttr(const Value& obj, absl::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(obj);
    case Value::Kind::kMap:
      if (DictMethods().contains(name)) return BoundMethod(obj, name);
      if (DictMutators().contains(name)) return Unsafe(obj, name);
      if (const Value* v = obj.map().Find(name)) return *v;
      return NoAttribute(obj, name);
    case Value::Kind::kString:
      if (StrMethods().contains(name)) return BoundMethod(obj, name);
      return NoAttribute(obj, name);
    case Value::Kind::kSequence:
      if (obj.seq().kind == SeqKind::kList) {
        if (ListMethods().contains(name)) return BoundMethod(obj, name);
        if (ListMutators().contains(name)) return Unsafe(obj, name);
      } else if (obj.seq().kind == SeqKind::kTuple) {
        if (name == "count" || name == "index") return BoundMethod(obj, name);
      }
      return NoAttribute(obj, name);
    case Value::Kind::kObject:
      if (const Value* v = obj.object().attrs.Find(name)) return *v;
      return NoAttribute(obj, name);
    default:
      return NoAttribute(obj, name);
  }
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  switch (obj.kind()) {
    case Value::Kind::kMap:
      if (IsHashable(key)) {
        if (const Value* v = obj.map().FindKey(key)) return *v;
      }
      break;
    case Value::Kind::kString:
      if (key.is_integral()) {
        const std::u32string cps = DecodeUtf8(obj.str());
        const auto i = NormalizeIndex(key.as_int(), static_cast<int64_t>(cps.size()));
        if (!i) return Value::Undefined("string index out of range");
        std::string ch;
        AppendUtf8(cps[static_cast<size_t>(*i)], &ch);
        return obj.is_markup() ? Value::Markup(std::move(ch)) : Value(std::move(ch));
      }
      break;
    case Value::Kind::kSequence: {
      const Sequence& s = obj.seq();
      if (key.is_integral() &&
          (s.kind == SeqKind::kList || s.kind == SeqKind::kTuple || s.kind == SeqKind::kRange)) {
        const auto i = NormalizeIndex(key.as_int(), static_cast<int64_t>(s.items.size()));
        if (!i) return Value::Undefined(absl::StrCat(TypeName(obj), " index out of range"));
        return s.items[static_cast<size_t>(*i)];
      }
      break;
    }
    default:
      break;
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  absl::StatusOr<std::string> r = Repr(key);
  return Value::Undefined(
      absl::StrCat("'", TypeName(obj), " object' has no element ", r.ok() ? *r : "?"));
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                               const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  bool sliceable = obj.is_string() || (obj.is_sequence() && (obj.seq().kind == SeqKind::kList ||
                                                             obj.seq().kind == SeqKind::kTuple ||
                                                             obj.seq().kind == SeqKind::kRange));
  for (const Value* v : {&start, &stop, &step}) {
    if (!v->is_none() && !v->is_integral()) sliceable = false;
  }
  if (!sliceable) return Value::Undefined(absl::StrCat("'", TypeName(obj), "' cannot be sliced"));
  const int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
  std::u32string cps;
  int64_t n;
  if (obj.is_string()) {
    cps = DecodeUtf8(obj.str());
    n = static_cast<int64_t>(cps.size());
  } else {
    n = static_cast<int64_t>(obj.seq().items.size());
  }
  // PySlice_AdjustIndices
  auto adjust = [&](const Value& v, bool is_start) -> int64_t {
    if (v.is_none()) {
      if (st > 0) return is_start ? 0 : n;
      return is_start ? n - 1 : -1;
    }
    int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t b = adjust(start, true);
  const int64_t e = adjust(stop, false);
  std::vector<int64_t> idx;
  if (st > 0) {
    for (int64_t i = b; i < e; i += st) idx.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += st) idx.push_back(i);
  }
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : idx) AppendUtf8(cps[static_cast<size_t>(i)], &out);
    return obj.is_markup() ? Value::Markup(std::move(out)) : Value(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i : idx) out.push_back(obj.seq().items[static_cast<size_t>(i)]);
  return Value::Seq(std::move(out), obj.seq().kind);
}

absl::StatusOr<Value> BinaryOp(absl::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (op == "%" && a.is_string()) return PercentFormat(a, b);
  if (b.is_undefined()) return UndefinedError(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = a.is_integral() && b.is_integral();
  auto unsupported = [&]() {
    return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", TypeName(a),
                                  "' and '", TypeName(b), "'"));
  };
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return Overflow();
      return Value(r);
    }
    if (nums) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {
        // Escaping at most sextuples a character (' → &#39;).
        TANDEM_RETURN_IF_ERROR(CheckBuiltSize(6 * (a.str().size() + b.str().size())));
        return Value::Markup(absl::StrCat(a.is_markup() ? a.str() : HtmlEscape(a.str()),
                                          b.is_markup() ? b.str() : HtmlEscape(b.str())));
      }
      TANDEM_RETURN_IF_ERROR(CheckBuiltSize(a.str().size() + b.str().size()));
      return Value(absl::StrCat(a.str(), b.str()));
    }
    if (a.is_list_like() && b.is_list_like() && a.seq().kind == b.seq().kind) {
      TANDEM_RETURN_IF_ERROR(CheckBuiltItems(a.seq().items.size() + b.seq().items.size()));
      std::vector<Value> out = a.seq().items;
      out.insert(out.end(), b.seq().items.begin(), b.seq().items.end());
      return Value::Seq(std::move(out), a.seq().kind);
    }
    if (a.is_string() || b.is_string()) {
      return TypeError(absl::StrCat("can only concatenate str (not \"",
                                    TypeName(a.is_string() ? b : a), "\") to str"));
    }
    return unsupported();
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return Overflow();
      return Value(r);
    }
    if (nums) return Value(a.as_float() - b.as_float());
    return unsupported();
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return Overflow();
      return Value(r);
    }
    if (nums) return Value(a.as_float() * b.as_float());
    if ((a.is_string() || a.is_list_like()) && b.is_integral()) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_list_like()) && a.is_integral()) return Repeat(b, a.as_int());
    return unsupported();
  }
  if (op == "/") {
    if (!nums) return unsupported();
    if (b.as_float() == 0) return ZeroDivision();
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!nums) return unsupported();
    if (ints) {
      if (b.as_int() == 0) return ZeroDivision();
      int64_t q = a.as_int() / b.as_int();
      if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
      return Value(q);
    }
    if (b.as_float() == 0) return ZeroDivision();
    return Value(std::floor(a.as_float() / b.as_float()));
  }
  if (op == "%") {
    if (!nums) return unsupported();
    if (ints) {
      if (b.as_int() == 0) return ZeroDivision();
      int64_t m = a.as_int() % b.as_int();
      if (m != 0 && ((m < 0) != (b.as_int() < 0))) m += b.as_int();
      return Value(m);
    }
    if (b.as_float() == 0) return ZeroDivision();
    return Value(PyFloorMod(a.as_float(), b.as_float()));
  }
  if (op == "**") {
    if (!nums) return unsupported();
    if (ints && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) {
        if (__builtin_mul_overflow(r, a.as_int(), &r)) return Overflow();
      }
      return Value(r);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown operator ", op));
}

absl::StatusOr<Value> Negate(const Value& a) {
  if (a.is_undefined()) return UndefinedError(a);
  if (a.is_integral()) return Value(-a.as_int());
  if (a.is_float()) return Value(-a.as_float());
  return TypeError(absl::StrCat("bad operand type for unary -: '", TypeName(a), "'"));
}

absl::StatusOr<Value> UnaryPlus(const Value& a) {
  if (a.is_undefined()) return UndefinedError(a);
  if (a.is_integral()) return Value(a.as_int());
  if (a.is_float()) return a;
  return TypeError(absl::StrCat("bad operand type for unary +: '", TypeName(a), "'"));
}

absl::StatusOr<Value> PercentFormat(const Value& fmt, const Value& args) {
  const bool markup = fmt.is_markup();
  std::vector<Value> positional;
  const Map* mapping = nullptr;
  if (args.is_sequence() && args.seq().kind == SeqKind::kTuple) {
    positional = args.seq().items;
  } else if (args.is_map()) {
    mapping = &args.map();
    positional.push_back(args);
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  const std::string& f = fmt.str();
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) return absl::InvalidArgumentError("ValueError: incomplete format");
    Value arg;
    bool have_arg = false;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos || mapping == nullptr) {
        return TypeError("format requires a mapping");
      }
      const Value* v = mapping->Find(f.substr(i + 1, close - i - 1));
      if (v == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("KeyError: '", f.substr(i + 1, close - i - 1), "'"));
      }
      arg = *v;
      have_arg = true;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && absl::string_view("-+ #0").find(f[i]) != absl::string_view::npos) {
      flags.push_back(f[i++]);
    }
    int64_t width = 0;
    while (i < f.size() && f[i] >= '0' && f[i] <= '9') {
      width = width * 10 + (f[i++] - '0');
      TANDEM_RETURN_IF_ERROR(CheckBuiltSize(static_cast<size_t>(width)));
    }
    int precision = -1;
    if (i < f.size() && f[i] == '.') {
      precision = 0;
      ++i;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') {
        precision = precision * 10 + (f[i++] - '0');
        if (precision > 1000) return absl::InvalidArgumentError("ValueError: precision too big");
      }
    }
    if (i >= f.size()) return absl::InvalidArgumentError("ValueError: incomplete format");
    const char conv = f[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_arg) {
      if (next >= positional.size()) {
        return TypeError("not enough arguments for format string");
      }
      arg = positional[next++];
    }
    std::string piece;
    switch (conv) {
      case 's':
      case 'r': {
        TANDEM_ASSIGN_OR_RETURN(piece, conv == 's' ? ToStr(arg) : Repr(arg));
        if (markup && !arg.is_markup()) piece = HtmlEscape(piece);
        if (precision >= 0) {
          const std::u32string cps = DecodeUtf8(piece);
          if (static_cast<int64_t>(cps.size()) > precision) {
            piece = EncodeUtf8(std::u32string_view(cps).substr(0, static_cast<size_t>(precision)));
          }
        }
        break;
      }
      case 'd':
      case 'i':
        if (!arg.is_number()) return TypeError("%d format: a real number is required");
        piece = absl::StrCat(arg.is_float() ? static_cast<int64_t>(arg.as_float()) : arg.as_int());
        if (flags.find('+') != std::string::npos && piece[0] != '-') piece = "+" + piece;
        break;
      case 'f':
      case 'F':
        if (!arg.is_number()) return TypeError("must be real number");
        piece = absl::StrFormat("%.*f", precision < 0 ? 6 : precision, arg.as_float());
        break;
      case 'x':
      case 'X':
        if (!arg.is_integral()) return TypeError("%x format: an integer is required");
        piece =
            conv == 'x' ? absl::StrFormat("%x", arg.as_int()) : absl::StrFormat("%X", arg.as_int());
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("unsupported format character '", std::string(1, conv), "'"));
    }
    const int64_t len = CodePointCount(piece);
    if (len < width) {
      const std::string pad(static_cast<size_t>(width - len),
                            flags.find('0') != std::string::npos && conv != 's' ? '0' : ' ');
      piece = flags.find('-') != std::string::npos ? piece + pad : pad + piece;
    }
    out += piece;
  }
  if (!used_mapping && next < positional.size() && mapping == nullptr) {
    return TypeError("not all arguments converted during string formatting");
  }
  return markup ? Value::Markup(std::move(out)) : Value(std::move(out));
}

absl::StatusOr<std::vector<Value>> BindArgs(absl::string_view what, const CallArgs& args,
                                            std::initializer_list<Param> params) {
  if (args.args.size() > params.size()) {
    return TypeError(absl::StrCat(what, "() takes at most ", params.size(), " argument(s) (",
                                  args.args.size(), " given)"));
  }
  std::vector<std::optional<Value>> bound(params.size());
  for (size_t i = 0; i < args.args.size(); ++i) bound[i] = args.args[i];
  for (const auto& [key, value] : args.kwargs) {
    size_t i = 0;
    for (const Param& p : params) {
      if (key == p.name) break;
      ++i;
    }
    if (i == params.size()) {
      return TypeError(absl::StrCat(what, "() got an unexpected keyword argument '", key, "'"));
    }
    if (bound[i].has_value()) {
      return TypeError(absl::StrCat(what, "() got multiple values for argument '", key, "'"));
    }
    bound[i] = value;
  }
  std::vector<Value> out;
  size_t i = 0;
  for (const Param& p : params) {
    if (bound[i].has_value()) {
      out.push_back(*bound[i]);
    } else if (p.fallback.has_value()) {
      out.push_back(*p.fallback);
    } else {
      return TypeError(absl::StrCat(what, "() missing required argument '", p.name, "'"));
    }
    ++i;
  }
  return out;
}

}  // namespace tandem::jinja
