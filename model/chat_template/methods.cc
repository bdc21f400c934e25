// The str, dict, list and tuple methods templates call (the sandbox allows the non-mutating
// ones; the mutating ones never get here: GetAttr returns the sandbox's unsafe Undefined).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"
#include "model/chat_template/pystr.h"

namespace tandem::jinja {
namespace {

Value Str(const Value& self, std::string s) {
  return self.is_markup() ? Value::Markup(std::move(s)) : Value(std::move(s));
}

// A string argument as a Markup method sees it: escaped unless it is Markup itself.
std::string Arg(const Value& self, const Value& arg) {
  if (self.is_markup() && !arg.is_markup()) return HtmlEscape(arg.str());
  return arg.str();
}

absl::Status NeedStr(absl::string_view method, const Value& v) {
  if (v.is_string()) return absl::OkStatus();
  return TypeError(absl::StrCat(method, "() argument must be str, not ", TypeName(v)));
}

// Python slice bounds for find/count's start/end, in code points -> byte offsets of s.
absl::StatusOr<std::pair<size_t, size_t>> Bounds(absl::string_view s, const Value& start,
                                                 const Value& end) {
  const std::u32string cps = DecodeUtf8(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  auto norm = [&](const Value& v, int64_t fallback) -> absl::StatusOr<int64_t> {
    if (v.is_none()) return fallback;
    if (!v.is_integral()) return TypeError("slice indices must be integers or None");
    int64_t i = v.as_int();
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  TANDEM_ASSIGN_OR_RETURN(const int64_t b, norm(start, 0));
  TANDEM_ASSIGN_OR_RETURN(const int64_t e, norm(end, n));
  size_t bb = 0, eb = 0;
  size_t byte = 0;
  for (int64_t i = 0; i <= n; ++i) {
    if (i == b) bb = byte;
    if (i == e) eb = byte;
    if (i < n) {
      std::string tmp;
      AppendUtf8(cps[static_cast<size_t>(i)], &tmp);
      byte += tmp.size();
    }
  }
  if (eb < bb) eb = bb;
  return std::make_pair(bb, eb);
}

// ---- str.format --------------------------------------------------------------------------------

absl::StatusOr<std::string> FormatSpec(const Value& v, absl::string_view spec) {
  if (spec.empty()) return ToStr(v);
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = std::string(1, spec[0]);
    align = spec[1];
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    if (align == 0) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
    width = width * 10 + (spec[i++] - '0');
    TANDEM_RETURN_IF_ERROR(CheckBuiltSize(static_cast<size_t>(width)));
  }
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
      precision = precision * 10 + (spec[i++] - '0');
      if (precision > 1000) return absl::InvalidArgumentError("ValueError: precision too big");
    }
  }
  char type = 0;
  if (i < spec.size()) type = spec[i++];
  if (i != spec.size()) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported format spec '", spec, "'"));
  }
  std::string body;
  if (v.is_string()) {
    if (type != 0 && type != 's') return absl::InvalidArgumentError("ValueError: bad format code");
    body = v.str();
    if (precision >= 0) {
      const std::u32string cps = DecodeUtf8(body);
      if (static_cast<int64_t>(cps.size()) > precision) {
        body = EncodeUtf8(std::u32string_view(cps).substr(0, static_cast<size_t>(precision)));
      }
    }
    if (align == 0) align = '<';
  } else if (v.is_number()) {
    const bool neg = v.is_float() ? std::signbit(v.as_float()) : v.as_int() < 0;
    if (type == 0 && v.is_integral() && !v.is_bool()) type = 'd';
    if (type == 'd') {
      if (!v.is_integral()) return absl::InvalidArgumentError("ValueError: bad format code 'd'");
      body = absl::StrCat(neg ? -v.as_int() : v.as_int());
    } else if (type == 'f' || type == 'F' || type == 'e' || type == '%') {
      double d = std::fabs(v.as_float());
      if (type == '%') d *= 100;
      const int digits = precision < 0 ? 6 : precision;
      body = type == 'e' ? absl::StrFormat("%.*e", digits, d) : absl::StrFormat("%.*f", digits, d);
      if (type == '%') body += "%";
    } else if (type == 0 && v.is_float() && precision < 0) {
      body = FloatRepr(std::fabs(v.as_float()));
    } else if (type == 0 && v.is_bool()) {
      body = v.as_bool() ? "True" : "False";
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unsupported format spec '", spec, "'"));
    }
    if (neg) {
      body = "-" + body;
    } else if (sign == '+') {
      body = "+" + body;
    } else if (sign == ' ') {
      body = " " + body;
    }
    if (align == 0) align = '>';
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported format spec '", spec, "' for ", TypeName(v)));
  }
  const int64_t len = CodePointCount(body);
  if (len >= width) return body;
  const int64_t pad = width - len;
  auto fills = [&](int64_t n) {
    std::string s;
    for (int64_t k = 0; k < n; ++k) s += fill;
    return s;
  };
  switch (align) {
    case '<':
      return body + fills(pad);
    case '^':
      return fills(pad / 2) + body + fills(pad - pad / 2);
    case '=':
      if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
        return body.substr(0, 1) + fills(pad) + body.substr(1);
      }
      return fills(pad) + body;
    default:
      return fills(pad) + body;
  }
}

absl::StatusOr<Value> StrFormat(const Value& self, const CallArgs& args) {
  const std::string& f = self.str();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return absl::InvalidArgumentError("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("ValueError: Single '{' encountered in format string");
    }
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) {
        return absl::InvalidArgumentError("ValueError: bad conversion in format string");
      }
      conversion = field[bang + 1];
      field.resize(bang);
    }
    Value arg;
    if (field.empty()) {
      if (auto_index >= args.args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("IndexError: Replacement index ", auto_index,
                                                       " out of range for positional args"));
      }
      arg = args.args[auto_index++];
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      // Python parses the index as a Py_ssize_t; one that does not fit is a ValueError.
      size_t k = 0;
      if (!absl::SimpleAtoi(field, &k) || k > static_cast<size_t>(INT64_MAX)) {
        return absl::InvalidArgumentError("ValueError: Too many decimal digits in format string");
      }
      if (k >= args.args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("IndexError: Replacement index ", k, " out of range"));
      }
      arg = args.args[k];
    } else {
      bool found = false;
      for (const auto& [key, value] : args.kwargs) {
        if (key == field) {
          arg = value;
          found = true;
        }
      }
      if (!found) return absl::InvalidArgumentError(absl::StrCat("KeyError: '", field, "'"));
    }
    std::string piece;
    if (conversion == 'r') {
      TANDEM_ASSIGN_OR_RETURN(piece, Repr(arg));
    } else if (conversion == 's' || conversion == 0) {
      if (conversion == 's') {
        TANDEM_ASSIGN_OR_RETURN(piece, ToStr(arg));
        TANDEM_ASSIGN_OR_RETURN(piece, FormatSpec(Value(piece), spec));
      } else {
        TANDEM_ASSIGN_OR_RETURN(piece, FormatSpec(arg, spec));
      }
    } else {
      return absl::InvalidArgumentError("ValueError: unknown conversion specifier");
    }
    if (self.is_markup() && !arg.is_markup()) piece = HtmlEscape(piece);
    out += piece;
  }
  return Str(self, std::move(out));
}

absl::StatusOr<Value> Pad(const Value& self, absl::string_view method, const CallArgs& args) {
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs(method, args, {{"width", std::nullopt}, {"fillchar", " "}}));
  if (!a[0].is_integral()) return TypeError("an integer is required");
  TANDEM_RETURN_IF_ERROR(NeedStr(method, a[1]));
  if (CodePointCount(a[1].str()) != 1) {
    return TypeError("The fill character must be exactly one character long");
  }
  const int64_t len = CodePointCount(self.str());
  TANDEM_RETURN_IF_ERROR(CheckBuiltSize(static_cast<size_t>(std::max<int64_t>(0, a[0].as_int()))));
  const int64_t pad = a[0].as_int() - len;
  if (pad <= 0) return self;
  auto fills = [&](int64_t n) {
    std::string s;
    for (int64_t k = 0; k < n; ++k) s += a[1].str();
    return s;
  };
  if (method == "ljust") return Str(self, self.str() + fills(pad));
  if (method == "rjust") return Str(self, fills(pad) + self.str());
  // center: CPython's split of an odd padding (unicodeobject.c pad()).
  const int64_t left = pad / 2 + (pad & a[0].as_int() & 1);
  return Str(self, fills(left) + self.str() + fills(pad - left));
}

absl::StatusOr<Value> StrMethod(const Value& self, absl::string_view name, const CallArgs& args) {
  const std::string& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                            BindArgs(name, args, {{"chars", Value::None()}}));
    std::string chars;
    if (!a[0].is_none()) {
      TANDEM_RETURN_IF_ERROR(NeedStr(name, a[0]));
      chars = Arg(self, a[0]);
    }
    return Str(self,
               PyStrip(s, a[0].is_none() ? nullptr : &chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                            BindArgs(name, args, {{"sep", Value::None()}, {"maxsplit", -1}}));
    if (!a[0].is_none()) {
      TANDEM_RETURN_IF_ERROR(NeedStr(name, a[0]));
      if (a[0].str().empty()) return absl::InvalidArgumentError("ValueError: empty separator");
    }
    if (!a[1].is_integral()) return TypeError("maxsplit must be an integer");
    std::vector<std::string> parts =
        PySplit(s, a[0].is_none() ? nullptr : &a[0].str(), a[1].as_int(), name == "rsplit");
    TANDEM_RETURN_IF_ERROR(CheckBuiltItems(parts.size()));
    std::vector<Value> out;
    for (std::string& part : parts) out.push_back(Str(self, std::move(part)));
    return Value::Seq(std::move(out));
  }
  if (name == "splitlines") {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                            BindArgs(name, args, {{"keepends", false}}));
    std::vector<std::string> parts = PySplitLines(s, Truthy(a[0]));
    TANDEM_RETURN_IF_ERROR(CheckBuiltItems(parts.size()));
    std::vector<Value> out;
    for (std::string& part : parts) out.push_back(Str(self, std::move(part)));
    return Value::Seq(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    TANDEM_ASSIGN_OR_RETURN(
        const std::vector<Value> a,
        BindArgs(name, args,
                 {{"prefix", std::nullopt}, {"start", Value::None()}, {"end", Value::None()}}));
    TANDEM_ASSIGN_OR_RETURN(const auto bounds, Bounds(s, a[1], a[2]));
    const absl::string_view hay =
        absl::string_view(s).substr(bounds.first, bounds.second - bounds.first);
    std::vector<Value> candidates;
    if (a[0].is_sequence() && a[0].seq().kind == SeqKind::kTuple) {
      candidates = a[0].seq().items;
    } else {
      candidates.push_back(a[0]);
    }
    for (const Value& c : candidates) {
      if (!c.is_string()) {
        return TypeError(
            absl::StrCat(name, " first arg must be str or a tuple of str, not ", TypeName(c)));
      }
      if (name == "startswith" ? absl::StartsWith(hay, c.str()) : absl::EndsWith(hay, c.str())) {
        return Value(true);
      }
    }
    return Value(false);
  }
  if (name == "replace") {
    TANDEM_ASSIGN_OR_RETURN(
        const std::vector<Value> a,
        BindArgs(name, args, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", -1}}));
    TANDEM_RETURN_IF_ERROR(NeedStr(name, a[0]));
    TANDEM_RETURN_IF_ERROR(NeedStr(name, a[1]));
    if (!a[2].is_integral()) return TypeError("count must be an integer");
    const std::string old = Arg(self, a[0]), repl = Arg(self, a[1]);
    if (repl.size() > old.size()) {
      TANDEM_RETURN_IF_ERROR(
          CheckBuiltSize(s.size() + static_cast<size_t>(PyCount(s, old)) * repl.size()));
    }
    return Str(self, PyReplace(s, old, repl, a[2].as_int()));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "swapcase") {
    TANDEM_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    if (name == "upper") return Str(self, PyUpper(s));
    if (name == "lower") return Str(self, PyLower(s));
    if (name == "title") return Str(self, PyTitle(s));
    if (name == "capitalize") return Str(self, PyCapitalize(s));
    std::string out;
    for (char32_t c : DecodeUtf8(s)) {
      AppendUtf8(ToUpper(c) != c ? ToUpper(c) : ToLower(c), &out);
    }
    return Str(self, std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    TANDEM_ASSIGN_OR_RETURN(
        const std::vector<Value> a,
        BindArgs(name, args,
                 {{"sub", std::nullopt}, {"start", Value::None()}, {"end", Value::None()}}));
    TANDEM_RETURN_IF_ERROR(NeedStr(name, a[0]));
    TANDEM_ASSIGN_OR_RETURN(const auto bounds, Bounds(s, a[1], a[2]));
    const absl::string_view hay =
        absl::string_view(s).substr(bounds.first, bounds.second - bounds.first);
    if (name == "count") return Value(PyCount(hay, a[0].str()));
    const int64_t found = PyFind(hay, a[0].str(), name == "rfind" || name == "rindex");
    if (found < 0) {
      if (name == "index" || name == "rindex") {
        return absl::InvalidArgumentError("ValueError: substring not found");
      }
      return Value(int64_t{-1});
    }
    return Value(found + CodePointCount(absl::string_view(s).substr(0, bounds.first)));
  }
  if (name == "join") {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                            BindArgs(name, args, {{"iterable", std::nullopt}}));
    TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                      TypeName(items[i]), " found"));
      }
      if (i > 0) out += s;
      TANDEM_RETURN_IF_ERROR(CheckBuiltSize(out.size() + items[i].str().size()));
      out += Arg(self, items[i]);
    }
    return Str(self, std::move(out));
  }
  if (name == "format") return StrFormat(self, args);
  if (name == "isalnum" || name == "isalpha" || name == "isdigit" || name == "isspace" ||
      name == "islower" || name == "isupper") {
    TANDEM_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    const std::u32string cps = DecodeUtf8(s);
    if (name == "islower" || name == "isupper") {
      bool cased = false;
      for (char32_t c : cps) {
        if (!IsCased(c)) continue;
        cased = true;
        if (name == "islower" ? ToLower(c) != c : ToUpper(c) != c) return Value(false);
      }
      return Value(cased);
    }
    if (cps.empty()) return Value(false);
    for (char32_t c : cps) {
      const bool ok = name == "isalnum"   ? (IsPyAlpha(c) || IsPyDigit(c))
                      : name == "isalpha" ? IsPyAlpha(c)
                      : name == "isdigit" ? IsPyDigit(c)
                                          : IsPySpace(c);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  if (name == "center" || name == "ljust" || name == "rjust") return Pad(self, name, args);
  if (name == "zfill") {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                            BindArgs(name, args, {{"width", std::nullopt}}));
    if (!a[0].is_integral()) return TypeError("an integer is required");
    TANDEM_RETURN_IF_ERROR(
        CheckBuiltSize(static_cast<size_t>(std::max<int64_t>(0, a[0].as_int()))));
    const int64_t pad = a[0].as_int() - CodePointCount(s);
    if (pad <= 0) return self;
    const size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    return Str(self,
               s.substr(0, sign) + std::string(static_cast<size_t>(pad), '0') + s.substr(sign));
  }
  if (name == "partition" || name == "rpartition") {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                            BindArgs(name, args, {{"sep", std::nullopt}}));
    TANDEM_RETURN_IF_ERROR(NeedStr(name, a[0]));
    const std::string sep = Arg(self, a[0]);
    if (sep.empty()) return absl::InvalidArgumentError("ValueError: empty separator");
    const size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos) {
      if (name == "partition") {
        return Value::Seq({Str(self, s), Str(self, ""), Str(self, "")}, SeqKind::kTuple);
      }
      return Value::Seq({Str(self, ""), Str(self, ""), Str(self, s)}, SeqKind::kTuple);
    }
    return Value::Seq(
        {Str(self, s.substr(0, hit)), Str(self, sep), Str(self, s.substr(hit + sep.size()))},
        SeqKind::kTuple);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                            BindArgs(name, args, {{"fix", std::nullopt}}));
    TANDEM_RETURN_IF_ERROR(NeedStr(name, a[0]));
    const std::string& fix = a[0].str();
    if (name == "removeprefix" && absl::StartsWith(s, fix)) return Value(s.substr(fix.size()));
    if (name == "removesuffix" && !fix.empty() && absl::EndsWith(s, fix)) {
      return Value(s.substr(0, s.size() - fix.size()));
    }
    return Value(s);
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported method str.", name));
}

absl::StatusOr<Value> DictMethod(const Value& self, absl::string_view name, const CallArgs& args) {
  const Map& m = self.map();
  if (name == "get") {
    TANDEM_ASSIGN_OR_RETURN(
        const std::vector<Value> a,
        BindArgs("get", args, {{"key", std::nullopt}, {"default", Value::None()}}));
    if (!IsHashable(a[0]))
      return TypeError(absl::StrCat("unhashable type: '", TypeName(a[0]), "'"));
    if (const Value* v = m.FindKey(a[0])) return *v;
    return a[1];
  }
  TANDEM_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
  if (name == "copy") return Value::Dict(m);
  std::vector<Value> out;
  for (const auto& [k, v] : m.entries()) {
    if (name == "items") {
      out.push_back(Value::Seq({k, v}, SeqKind::kTuple));
    } else if (name == "keys") {
      out.push_back(k);
    } else {
      out.push_back(v);
    }
  }
  return Value::Seq(std::move(out), name == "items"  ? SeqKind::kDictItems
                                    : name == "keys" ? SeqKind::kDictKeys
                                                     : SeqKind::kDictValues);
}

absl::StatusOr<Value> SeqMethod(const Value& self, absl::string_view name, const CallArgs& args) {
  const std::vector<Value>& items = self.seq().items;
  if (name == "copy") {
    TANDEM_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    return Value::Seq(items, self.seq().kind);
  }
  TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> a,
                          BindArgs(name, args, {{"value", std::nullopt}}));
  if (name == "count") {
    int64_t n = 0;
    for (const Value& v : items) n += Equals(v, a[0]) ? 1 : 0;
    return Value(n);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (Equals(items[i], a[0])) return Value(static_cast<int64_t>(i));
  }
  return absl::InvalidArgumentError(absl::StrCat("ValueError: value is not in ", TypeName(self)));
}

}  // namespace

absl::StatusOr<Value> CallMethod(const Value& self, absl::string_view name, const CallArgs& args) {
  if (self.is_string()) return StrMethod(self, name, args);
  if (self.is_map()) return DictMethod(self, name, args);
  if (self.is_list_like()) return SeqMethod(self, name, args);
  return absl::InvalidArgumentError(
      absl::StrCat("AttributeError: '", TypeName(self), "' object has no attribute '", name, "'"));
}

}  // namespace tandem::jinja
