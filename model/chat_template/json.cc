// json.dumps as transformers' `tojson` filter calls it (ensure_ascii, indent, separators,
// sort_keys), with Python's float repr and its TypeError for values JSON cannot hold.
#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"
#include "model/chat_template/pystr.h"

namespace tandem::jinja {
namespace {

constexpr int kMaxDepth = 512;

// json.dumps' conversion of a dict key to the object key string.
absl::StatusOr<std::string> JsonKey(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.str();
    case Value::Kind::kNone:
      return std::string("null");
    case Value::Kind::kBool:
      return std::string(k.as_bool() ? "true" : "false");
    case Value::Kind::kInt:
      return absl::StrCat(k.as_int());
    case Value::Kind::kFloat:
      if (std::isnan(k.as_float())) return std::string("NaN");
      if (std::isinf(k.as_float())) return std::string(k.as_float() < 0 ? "-Infinity" : "Infinity");
      return FloatRepr(k.as_float());
    default:
      return TypeError(
          absl::StrCat("keys must be str, int, float, bool or None, not ", TypeName(k)));
  }
}

absl::Status Dump(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > kMaxDepth) return absl::InvalidArgumentError("RecursionError: JSON nesting too deep");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out->append("null");
      return absl::OkStatus();
    case Value::Kind::kBool:
      out->append(v.as_bool() ? "true" : "false");
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.as_int());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) {
        out->append("NaN");
      } else if (std::isinf(d)) {
        out->append(d < 0 ? "-Infinity" : "Infinity");
      } else {
        out->append(FloatRepr(d));
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      out->append(JsonQuote(v.str(), o.ensure_ascii));
      return absl::OkStatus();
    case Value::Kind::kSequence:
    case Value::Kind::kMap:
      break;
    default:
      return TypeError(absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }
  const bool is_map = v.is_map();
  if (!is_map && !v.is_list_like()) {
    return TypeError(absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }
  const size_t n = is_map ? v.map().size() : v.seq().items.size();
  if (n == 0) {
    out->append(is_map ? "{}" : "[]");
    return absl::OkStatus();
  }
  std::string newline_indent;
  if (o.indent.has_value()) {
    newline_indent.push_back('\n');  // not `= "\n"`: GCC 12's -Wrestrict misfires on it under ASan
    for (int i = 0; i <= depth; ++i) newline_indent += *o.indent;
  }
  out->push_back(is_map ? '{' : '[');
  out->append(newline_indent);
  const std::string separator = o.item_separator + newline_indent;
  if (is_map) {
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : v.map().entries()) entries.push_back(&e);
    if (o.sort_keys) {
      absl::Status error;
      std::stable_sort(entries.begin(), entries.end(), [&error](const auto* a, const auto* b) {
        absl::StatusOr<bool> lt = Less(a->first, b->first);
        if (!lt.ok()) {
          error = lt.status();
          return false;
        }
        return *lt;
      });
      TANDEM_RETURN_IF_ERROR(error);
    }
    bool first = true;
    for (const auto* e : entries) {
      if (!first) out->append(separator);
      first = false;
      TANDEM_ASSIGN_OR_RETURN(const std::string key, JsonKey(e->first));
      out->append(JsonQuote(key, o.ensure_ascii));
      out->append(o.key_separator);
      TANDEM_RETURN_IF_ERROR(Dump(e->second, o, depth + 1, out));
    }
  } else {
    bool first = true;
    for (const Value& item : v.seq().items) {
      if (!first) out->append(separator);
      first = false;
      TANDEM_RETURN_IF_ERROR(Dump(item, o, depth + 1, out));
    }
  }
  if (o.indent.has_value()) {
    out->push_back('\n');
    for (int i = 0; i < depth; ++i) out->append(*o.indent);
  }
  out->push_back(is_map ? '}' : ']');
  return absl::OkStatus();
}

}  // namespace

std::string JsonQuote(absl::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  auto escape_cp = [&out](uint32_t c) { out += absl::StrFormat("\\u%04x", c); };
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          escape_cp(c);
        } else if (ensure_ascii && c > 0x7E) {
          if (c >= 0x10000) {
            const uint32_t v = c - 0x10000;
            escape_cp(0xD800 | (v >> 10));
            escape_cp(0xDC00 | (v & 0x3FF));
          } else {
            escape_cp(c);
          }
        } else {
          AppendUtf8(c, &out);
        }
    }
  }
  out += "\"";
  return out;
}

absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  TANDEM_RETURN_IF_ERROR(Dump(value, options, 0, &out));
  return out;
}

}  // namespace tandem::jinja
