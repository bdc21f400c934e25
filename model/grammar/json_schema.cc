#include "model/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/integer_range_gbnf.h"
#include "model/grammar/regex.h"
#include "model/grammar/string_view_util.h"

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxWsIndent = 20;
constexpr int kMaxIntDigits = 16;
constexpr int kMaxDepth = 100;
constexpr int64_t kMaxCountKeyword = 1000;

const std::set<std::string>& Annotations() {
  static const auto* k =
      new std::set<std::string>{"description", "title",       "default",          "examples",
                                "$schema",     "$id",         "$comment",         "deprecated",
                                "readOnly",    "writeOnly",   "strict",           "discriminator",
                                "$defs",       "definitions", "contentMediaType", "contentEncoding",
                                "$anchor"};
  return *k;
}

const std::set<std::string>& Supported() {
  static const auto* k = new std::set<std::string>{"type",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "enum",
                                                   "const",
                                                   "items",
                                                   "prefixItems",
                                                   "minItems",
                                                   "maxItems",
                                                   "anyOf",
                                                   "oneOf",
                                                   "allOf",
                                                   "$ref",
                                                   "pattern",
                                                   "minLength",
                                                   "maxLength",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum",
                                                   "format"};
  return *k;
}

std::string PointerEscape(absl::string_view key) {
  return absl::StrReplaceAll(key, {{"~", "~0"}, {"/", "~1"}});
}

std::string Sanitize(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
    if (out.size() >= 24) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

class Converter {
 public:
  Converter(const Json& doc, absl::string_view root) : doc_(doc), root_(root) {}

  absl::StatusOr<std::string> Run() {
    if (!IsGbnfRuleName(root_)) {
      return absl::InvalidArgumentError(absl::StrCat("json_schema: bad rule name '", root_, "'"));
    }
    TANDEM_ASSIGN_OR_RETURN(std::string expr, Visit(doc_, "", 0));
    std::string out = absl::StrCat(root_, " ::= ", expr, "\n");
    for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    return out;
  }

  // Any-JSON helpers (also for JsonObjectGbnf / JsonValueGbnf).
  std::string Ws() {
    return Common("ws", absl::StrCat("| \" \" | \"\\n\" [ \\t]{0,", kMaxWsIndent, "}"));
  }
  std::string CharRule() {
    const std::string hex = "[0-9a-fA-F]";
    return Common("char", absl::StrCat("[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
                                       "([0-9a-cA-CefEF] ",
                                       hex, "{3} | [dD] [0-7] ", hex, "{2}))"));
  }
  std::string StringRule() {
    // The character rule repeated: inlined by the compiler, so the loop stays one frame.
    const std::string c = CharRule();
    return Common("string", absl::StrCat("\"\\\"\" ", c, "* \"\\\"\""));
  }
  std::string IntegerRule() {
    return Common("integer",
                  absl::StrCat("\"-\"? (\"0\" | [1-9] [0-9]{0,", kMaxIntDigits - 1, "})"));
  }
  std::string NumberRule() {
    return Common("number", absl::StrCat("\"-\"? (\"0\" | [1-9] [0-9]{0,", kMaxIntDigits - 1,
                                         "}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?"));
  }
  std::string BooleanRule() { return Common("boolean", "\"true\" | \"false\""); }
  std::string NullRule() { return Common("null", "\"null\""); }
  std::string ValueRule() {
    const std::string name = absl::StrCat(root_, "-value");
    if (!defined_.contains(name)) {
      defined_.insert(name);
      const std::string obj = ObjectAnyRule(), arr = ArrayAnyRule();
      rules_.emplace_back(
          name, absl::StrCat(obj, " | ", arr, " | ", StringRule(), " | ", NumberRule(), " | ",
                             BooleanRule(), " | ", NullRule()));
    }
    return name;
  }
  std::string ObjectAnyRule() {
    const std::string name = absl::StrCat(root_, "-object");
    if (!defined_.contains(name)) {
      defined_.insert(name);
      const std::string ws = Ws(), s = StringRule(), v = ValueRule();
      const std::string kv = absl::StrCat(s, " \":\" ", ws, " ", v);
      rules_.emplace_back(name, absl::StrCat("\"{\" (", ws, " ", kv, " (\",\" ", ws, " ", kv,
                                             ")*)? ", ws, " \"}\""));
    }
    return name;
  }
  std::string ArrayAnyRule() {
    const std::string name = absl::StrCat(root_, "-array");
    if (!defined_.contains(name)) {
      defined_.insert(name);
      const std::string ws = Ws(), v = ValueRule();
      rules_.emplace_back(
          name, absl::StrCat("\"[\" (", ws, " ", v, " (\",\" ", ws, " ", v, ")*)? ", ws, " \"]\""));
    }
    return name;
  }

 private:
  std::string Common(absl::string_view suffix, std::string body) {
    std::string name = absl::StrCat(root_, "-", suffix);
    if (defined_.insert(name).second) rules_.emplace_back(name, std::move(body));
    return name;
  }

  std::string NewRuleName(absl::string_view hint) {
    std::string base = absl::StrCat(root_, "-", hint.empty() ? "s" : hint);
    std::string name = base;
    for (int n = 2; defined_.contains(name) || reserved_.contains(name); ++n) {
      name = absl::StrCat(base, "-", n);
    }
    reserved_.insert(name);
    return name;
  }

  std::string Define(absl::string_view hint, std::string body) {
    std::string name = NewRuleName(hint);
    defined_.insert(name);
    rules_.emplace_back(name, std::move(body));
    return name;
  }

  // Defines a name NewRuleName returned (or any unused one).
  std::string DefineExact(std::string name, std::string body) {
    defined_.insert(name);
    reserved_.insert(name);
    rules_.emplace_back(name, std::move(body));
    return name;
  }

  absl::Status Unsupported(absl::string_view keyword, absl::string_view ptr) const {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: unsupported keyword '", keyword,
                                                   "' at ", ptr.empty() ? "/" : ptr));
  }
  absl::Status Bad(absl::string_view what, absl::string_view ptr) const {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: ", what, " at ", ptr.empty() ? "/" : ptr));
  }

  absl::StatusOr<std::string> Visit(const Json& s, const std::string& ptr, int depth) {
    if (depth > kMaxDepth) return Bad(absl::StrCat("nested deeper than ", kMaxDepth), ptr);
    if (s.is_boolean()) {
      if (s.get<bool>()) return ValueRule();
      return Bad("the schema false matches nothing", ptr);
    }
    if (!s.is_object()) return Bad("a schema must be an object or a boolean", ptr);
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (Supported().count(k) || Annotations().count(k) || k.rfind("x-", 0) == 0) continue;
      return Unsupported(k, ptr);
    }
    if (s.contains("$ref")) {
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (it.key() != "$ref" && !Annotations().count(it.key())) {
          return Bad(absl::StrCat("keyword '", it.key(), "' next to '$ref' is not supported"), ptr);
        }
      }
      return Ref(s["$ref"], ptr + "/$ref", depth);
    }
    if (s.contains("allOf")) {
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1 || s.size() != 1 + CountAnnotations(s)) {
        return Bad("'allOf' is supported only with exactly one schema and nothing beside it",
                   ptr + "/allOf");
      }
      return Visit(all[0], ptr + "/allOf/0", depth + 1);
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      const Json& list = s[k];
      const std::string p = absl::StrCat(ptr, "/", k);
      if (!list.is_array() || list.empty())
        return Bad(absl::StrCat("'", k, "' needs a non-empty array"), p);
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (it.key() != k && !Annotations().count(it.key())) {
          return Bad(absl::StrCat("keyword '", it.key(), "' next to '", k, "' is not supported"),
                     ptr);
        }
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(std::string a, Visit(list[i], absl::StrCat(p, "/", i), depth + 1));
        alts.push_back(std::move(a));
      }
      return Define(Hint(ptr), absl::StrJoin(alts, " | "));
    }
    if (s.contains("const") || s.contains("enum")) return EnumOrConst(s, ptr);

    // Types.
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string())
            return Bad("'type' must be a string or an array of strings", ptr + "/type");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Bad("'type' must be a string or an array of strings", ptr + "/type");
      }
    } else {
      // Inferred from the keywords present; none: any value.
      if (s.contains("properties") || s.contains("required") ||
          s.contains("additionalProperties")) {
        types.push_back("object");
      } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
                 s.contains("maxItems")) {
        types.push_back("array");
      } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") ||
                 s.contains("format")) {
        types.push_back("string");
      } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                 s.contains("exclusiveMaximum")) {
        types.push_back("number");
      } else {
        return ValueRule();
      }
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      absl::StatusOr<std::string> a;
      if (t == "object") {
        a = Object(s, ptr, depth);
      } else if (t == "array") {
        a = Array(s, ptr, depth);
      } else if (t == "string") {
        a = String(s, ptr);
      } else if (t == "integer") {
        a = Integer(s, ptr);
      } else if (t == "number") {
        a = Number(s, ptr);
      } else if (t == "boolean") {
        a = BooleanRule();
      } else if (t == "null") {
        a = NullRule();
      } else {
        return Bad(absl::StrCat("unknown type '", t, "'"), ptr + "/type");
      }
      if (!a.ok()) return a.status();
      alts.push_back(*std::move(a));
    }
    if (alts.size() == 1) return alts[0];
    return Define(Hint(ptr), absl::StrJoin(alts, " | "));
  }

  static size_t CountAnnotations(const Json& s) {
    size_t n = 0;
    for (auto it = s.begin(); it != s.end(); ++it) n += Annotations().count(it.key());
    return n;
  }

  std::string Hint(const std::string& ptr) const {
    const size_t slash = ptr.rfind('/');
    return Sanitize(slash == std::string::npos ? ptr : ptr.substr(slash + 1));
  }

  absl::StatusOr<std::string> Ref(const Json& ref, const std::string& ptr, int depth) {
    if (!ref.is_string()) return Bad("'$ref' must be a string", ptr);
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#') {
      return Bad(absl::StrCat("only local references ('#...') are supported, not '", target, "'"),
                 ptr);
    }
    auto known = ref_rules_.find(target);
    if (known != ref_rules_.end()) return known->second;
    std::string pointer = target.substr(1);
    const Json* node = nullptr;
    try {
      nlohmann::json_pointer<std::string> jp(pointer);
      if (doc_.contains(jp)) node = &doc_.at(jp);
    } catch (const std::exception&) {
      return Bad(absl::StrCat("bad reference '", target, "'"), ptr);
    }
    if (node == nullptr) return Bad(absl::StrCat("reference '", target, "' not found"), ptr);
    const size_t slash = pointer.rfind('/');
    std::string name = NewRuleName(absl::StrCat(
        "ref-",
        Sanitize(slash == std::string::npos ? std::string("root") : pointer.substr(slash + 1))));
    ref_rules_[target] = name;
    TANDEM_ASSIGN_OR_RETURN(std::string body, Visit(*node, pointer, depth + 1));
    defined_.insert(name);
    rules_.emplace_back(name, body);
    return name;
  }

  absl::StatusOr<std::string> EnumOrConst(const Json& s, const std::string& ptr) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (k != "enum" && k != "const" && k != "type" && !Annotations().count(k)) {
        return Bad(absl::StrCat("keyword '", k, "' next to 'enum'/'const' is not supported"), ptr);
      }
    }
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array()) return Bad("'enum' must be an array", ptr + "/enum");
      for (const Json& v : e) {
        if (s.contains("const") && v != s["const"]) continue;
        values.push_back(v);
      }
      if (s.contains("const")) values.resize(std::min<size_t>(values.size(), 1));
    }
    std::set<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) types.insert(t.get<std::string>());
      if (t.is_array()) {
        for (const Json& x : t) {
          if (x.is_string()) types.insert(x.get<std::string>());
        }
      }
    }
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (const Json& v : values) {
      if (!types.empty() && !MatchesType(v, types)) continue;
      std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (!seen.insert(text).second) continue;
      alts.push_back(GbnfLiteral(text));
    }
    if (alts.empty()) return Bad("no value of 'enum'/'const' is allowed by 'type'", ptr);
    if (alts.size() == 1) return alts[0];
    return Define(Hint(ptr), absl::StrJoin(alts, " | "));
  }

  static bool MatchesType(const Json& v, const std::set<std::string>& types) {
    if (types.count("integer") &&
        (v.is_number_integer() ||
         (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))) {
      return true;
    }
    if (types.count("number") && v.is_number()) return true;
    if (types.count("string") && v.is_string()) return true;
    if (types.count("boolean") && v.is_boolean()) return true;
    if (types.count("null") && v.is_null()) return true;
    if (types.count("object") && v.is_object()) return true;
    if (types.count("array") && v.is_array()) return true;
    return false;
  }

  absl::StatusOr<std::string> Object(const Json& s, const std::string& ptr, int depth) {
    const std::string ws = Ws();
    const bool has_props = s.contains("properties");
    if (has_props && !s["properties"].is_object()) {
      return Bad("'properties' must be an object", ptr + "/properties");
    }
    std::vector<std::string> names;
    std::vector<std::string> values;  // GBNF per property
    if (has_props) {
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
        names.push_back(it.key());
        TANDEM_ASSIGN_OR_RETURN(
            std::string v,
            Visit(it.value(), absl::StrCat(ptr, "/properties/", PointerEscape(it.key())),
                  depth + 1));
        values.push_back(std::move(v));
      }
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) return Bad("'required' must be an array", ptr + "/required");
      for (const Json& x : r) {
        if (!x.is_string()) return Bad("'required' must list strings", ptr + "/required");
        required.insert(x.get<std::string>());
      }
    }
    // Required names without a schema: any value.
    for (const std::string& r : required) {
      if (std::find(names.begin(), names.end(), r) == names.end()) {
        names.push_back(r);
        values.push_back(ValueRule());
      }
    }
    // Further properties.
    std::string extra_value;  // empty: none allowed
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (a.is_boolean()) {
        if (a.get<bool>()) extra_value = ValueRule();
      } else {
        TANDEM_ASSIGN_OR_RETURN(extra_value, Visit(a, ptr + "/additionalProperties", depth + 1));
      }
    } else if (!has_props) {
      extra_value = ValueRule();
    }
    if (names.empty() && !extra_value.empty() && extra_value == ValueRule() && required.empty()) {
      return ObjectAnyRule();
    }
    const std::string hint = Hint(ptr).empty() ? "obj" : Hint(ptr);
    std::string extra_kv;
    if (!extra_value.empty()) {
      extra_kv = absl::StrCat(ExtraKey(names, hint), " \":\" ", ws, " ", extra_value);
    }
    auto kv = [&](size_t i) {
      std::string key =
          nlohmann::json(names[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return absl::StrCat(GbnfLiteral(key), " \":\" ", ws, " ", values[i]);
    };
    // rest(k): what may follow once some property was written, from property k on;
    // first(k): the same before any was written (no leading comma).
    const size_t n = names.size();
    std::vector<std::string> rest(n + 1), first(n + 1);
    const std::string base = NewRuleName(hint);
    rest[n] = DefineExact(
        absl::StrCat(base, "-r", n),
        extra_kv.empty() ? std::string("\"\"") : absl::StrCat("(\",\" ", ws, " ", extra_kv, ")*"));
    first[n] = extra_kv.empty() ? std::string("\"\"")
                                : absl::StrCat("(", ws, " ", extra_kv, " ", rest[n], ")?");
    for (size_t k = n; k-- > 0;) {
      const bool req = required.count(names[k]) > 0;
      const std::string r = absl::StrCat("\",\" ", ws, " ", kv(k), " ", rest[k + 1]);
      rest[k] =
          DefineExact(absl::StrCat(base, "-r", k), req ? r : absl::StrCat(r, " | ", rest[k + 1]));
      const std::string f = absl::StrCat(ws, " ", kv(k), " ", rest[k + 1]);
      first[k] =
          DefineExact(absl::StrCat(base, "-f", k), req ? f : absl::StrCat(f, " | ", first[k + 1]));
    }
    return DefineExact(base, absl::StrCat("\"{\" ", first[0], " ", ws, " \"}\""));
  }

  // A key for an additional property: a string without escapes, unlike every declared name.
  std::string ExtraKey(const std::vector<std::string>& declared, const std::string& hint) {
    // Trie of the declared names (as code points of the unescaped content).
    struct Node {
      std::map<std::string, int> next;  // UTF-8 char -> node
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& name : declared) {
      // A name that needs escapes cannot be written by this rule anyway.
      if (std::any_of(name.begin(), name.end(), [](char c) {
            return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
          })) {
        continue;
      }
      int at = 0;
      size_t i = 0;
      while (i < name.size()) {
        size_t len = 1;
        const unsigned char c = static_cast<unsigned char>(name[i]);
        if (c >= 0xF0)
          len = 4;
        else if (c >= 0xE0)
          len = 3;
        else if (c >= 0xC0)
          len = 2;
        const std::string ch = name.substr(i, len);
        i += len;
        auto it = trie[at].next.find(ch);
        if (it == trie[at].next.end()) {
          trie.push_back(Node{});
          it = trie[at].next.emplace(ch, static_cast<int>(trie.size()) - 1).first;
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
    const std::string any = Common("keychar", "[^\"\\\\\\x00-\\x1F]");
    // Rule per trie node: the rest of a key whose content so far is that node's prefix.
    std::vector<std::string> names(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) names[i] = NewRuleName(absl::StrCat(hint, "-key", i));
    for (size_t i = 0; i < trie.size(); ++i) {
      std::vector<std::string> alts;
      if (!trie[i].terminal) alts.push_back("\"\\\"\"");
      std::string excluded = "\"\\\\\\x00-\\x1F";
      for (const auto& [ch, child] : trie[i].next) {
        alts.push_back(absl::StrCat(GbnfLiteral(ch), " ", names[child]));
        // The class excludes the chars with children.
        for (const char b : ch) {
          if (b == '\\' || b == ']' || b == '[' || b == '-' || b == '^' || b == '"')
            excluded += '\\';
          excluded += b;
        }
      }
      alts.push_back(absl::StrCat("[^", excluded, "] ", any, "* \"\\\"\""));
      defined_.insert(names[i]);
      rules_.emplace_back(names[i], absl::StrJoin(alts, " | "));
    }
    return absl::StrCat("\"\\\"\" ", names[0]);
  }

  absl::StatusOr<int64_t> Count(const Json& s, const char* key, const std::string& ptr) {
    const Json& v = s[key];
    if (!v.is_number_integer() &&
        !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
      return Bad(absl::StrCat("'", key, "' must be a non-negative integer"), ptr + "/" + key);
    }
    const double d = v.get<double>();
    if (d < 0)
      return Bad(absl::StrCat("'", key, "' must be a non-negative integer"), ptr + "/" + key);
    if (d > kMaxCountKeyword) {
      return Bad(absl::StrCat("'", key, "' above ", kMaxCountKeyword, " is not supported"),
                 ptr + "/" + key);
    }
    return static_cast<int64_t>(d);
  }

  absl::StatusOr<std::string> Array(const Json& s, const std::string& ptr, int depth) {
    const std::string ws = Ws();
    int64_t min = 0, max = -1;
    if (s.contains("minItems")) {
      TANDEM_ASSIGN_OR_RETURN(min, Count(s, "minItems", ptr));
    }
    if (s.contains("maxItems")) {
      TANDEM_ASSIGN_OR_RETURN(max, Count(s, "maxItems", ptr));
    }
    if (max >= 0 && max < min) return Bad("'maxItems' is below 'minItems'", ptr);
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) return Bad("'prefixItems' must be an array", ptr + "/prefixItems");
      for (size_t i = 0; i < p.size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(std::string e,
                                Visit(p[i], absl::StrCat(ptr, "/prefixItems/", i), depth + 1));
        prefix.push_back(std::move(e));
      }
    }
    std::string item;  // empty: no items past the prefix
    if (s.contains("items")) {
      const Json& it = s["items"];
      if (it.is_boolean() && !it.get<bool>()) {
        item.clear();
      } else {
        TANDEM_ASSIGN_OR_RETURN(item, Visit(it, ptr + "/items", depth + 1));
      }
    } else if (prefix.empty() || min > static_cast<int64_t>(prefix.size())) {
      // No `items`: further items are any values (JSON Schema); after prefixItems the grammar
      // writes none unless minItems needs them.
      item = ValueRule();
    }
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (item.empty()) {
      if (max < 0 || max > k) max = k;
      if (min > max) return Bad("'minItems' needs more items than 'prefixItems' allows", ptr);
    }
    if (max == 0)
      return Define(Hint(ptr).empty() ? "arr" : Hint(ptr), absl::StrCat("\"[\" ", ws, " \"]\""));
    // Elements after the first, from index i on (i >= 1): at least max(min - i, 0) more.
    std::function<std::string(int64_t)> tail = [&](int64_t i) -> std::string {
      if (max >= 0 && i >= max) return "";
      if (i >= k) {
        const int64_t lo = std::max<int64_t>(min - i, 0);
        if (max < 0) return absl::StrCat("(\",\" ", ws, " ", item, "){", lo, ",}");
        return absl::StrCat("(\",\" ", ws, " ", item, "){", lo, ",", max - i, "}");
      }
      const std::string more = absl::StrCat("\",\" ", ws, " ", prefix[i], " ", tail(i + 1));
      return i >= min ? absl::StrCat("(", more, ")?") : absl::StrCat("(", more, ")");
    };
    const std::string first = k > 0 ? prefix[0] : item;
    const std::string body = absl::StrCat(first, " ", tail(1), " ", ws);
    const std::string hint = Hint(ptr).empty() ? "arr" : Hint(ptr);
    if (min == 0) return Define(hint, absl::StrCat("\"[\" ", ws, " (", body, ")? \"]\""));
    return Define(hint, absl::StrCat("\"[\" ", ws, " ", body, " \"]\""));
  }

  absl::StatusOr<std::string> String(const Json& s, const std::string& ptr) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (has_len) return Bad("'pattern' with 'minLength'/'maxLength' is not supported", ptr);
      if (!s["pattern"].is_string()) return Bad("'pattern' must be a string", ptr + "/pattern");
      return Pattern(s["pattern"].get<std::string>(), /*search=*/true, ptr + "/pattern");
    }
    if (s.contains("format") && !has_len) {
      if (!s["format"].is_string()) return Bad("'format' must be a string", ptr + "/format");
      const std::string f = s["format"].get<std::string>();
      const std::string date = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
      const std::string time =
          "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5]"
          "[0-9])";
      std::string re;
      if (f == "date") re = date;
      if (f == "time") re = time;
      if (f == "date-time") re = date + "T" + time;
      if (f == "uuid") re = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
      if (f == "email") {
        re = "[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\\.[a-zA-Z0-9-]{1,63}){0,3}\\.[a-zA-Z]{2,"
             "12}";
      }
      if (f == "ipv4") {
        re =
            "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|"
            "[1-9]?[0-9])";
      }
      if (!re.empty()) return Pattern("^" + re + "$", true, ptr + "/format");
      // Other formats are annotations: any string.
    }
    if (!has_len) return StringRule();
    int64_t min = 0, max = -1;
    if (s.contains("minLength")) {
      TANDEM_ASSIGN_OR_RETURN(min, Count(s, "minLength", ptr));
    }
    if (s.contains("maxLength")) {
      TANDEM_ASSIGN_OR_RETURN(max, Count(s, "maxLength", ptr));
    }
    if (max >= 0 && max < min) return Bad("'maxLength' is below 'minLength'", ptr);
    const std::string c = CharRule();
    const std::string rep =
        max < 0 ? absl::StrCat("{", min, ",}") : absl::StrCat("{", min, ",", max, "}");
    return Define(Hint(ptr).empty() ? "str" : Hint(ptr),
                  absl::StrCat("\"\\\"\" ", c, rep, " \"\\\"\""));
  }

  absl::StatusOr<std::string> Pattern(const std::string& re, bool search, const std::string& ptr) {
    RegexGbnfOptions opt;
    opt.search = search;
    opt.json_string_content = true;
    const std::string name = NewRuleName(absl::StrCat(Hint(ptr), "-pattern"));
    absl::StatusOr<std::string> g = RegexToGbnf(re, name, opt);
    if (!g.ok()) return Bad(g.status().message(), ptr);
    // RegexToGbnf wrote "name ::= body\n".
    std::string body = g->substr(name.size() + 5);
    while (!body.empty() && body.back() == '\n') body.pop_back();
    defined_.insert(name);
    rules_.emplace_back(name, body);
    return Define(absl::StrCat(Hint(ptr), "-str"), absl::StrCat("\"\\\"\" ", name, " \"\\\"\""));
  }

  absl::StatusOr<std::string> Integer(const Json& s, const std::string& ptr) {
    const bool bounded = s.contains("minimum") || s.contains("maximum") ||
                         s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
    if (!bounded) return IntegerRule();
    constexpr int64_t kLimit = 9999999999999999;  // 16 digits
    int64_t lo = -kLimit, hi = kLimit;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (!s.contains(k)) continue;
      const Json& v = s[k];
      if (!v.is_number()) return Bad(absl::StrCat("'", k, "' must be a number"), ptr + "/" + k);
      const double d = std::clamp(v.get<double>(), -1e17, 1e17);
      const std::string key = k;
      if (key == "minimum") lo = std::max(lo, static_cast<int64_t>(std::ceil(d)));
      if (key == "maximum") hi = std::min(hi, static_cast<int64_t>(std::floor(d)));
      if (key == "exclusiveMinimum") lo = std::max(lo, static_cast<int64_t>(std::floor(d)) + 1);
      if (key == "exclusiveMaximum") hi = std::min(hi, static_cast<int64_t>(std::ceil(d)) - 1);
    }
    lo = std::max(lo, -kLimit);
    hi = std::min(hi, kLimit);
    if (lo > hi) return Bad("no integer satisfies the bounds", ptr);
    std::vector<std::string> alts;
    if (lo < 0) {
      const uint64_t mag_lo = hi < 0 ? static_cast<uint64_t>(-hi) : 1;
      alts.push_back(absl::StrCat(
          "\"-\" ", grammar_internal::NonNegativeRangeGbnf(mag_lo, static_cast<uint64_t>(-lo))));
    }
    if (hi >= 0) {
      alts.push_back(grammar_internal::NonNegativeRangeGbnf(
          static_cast<uint64_t>(std::max<int64_t>(lo, 0)), static_cast<uint64_t>(hi)));
    }
    return Define(Hint(ptr).empty() ? "int" : Hint(ptr), absl::StrJoin(alts, " | "));
  }

  absl::StatusOr<std::string> Number(const Json& s, const std::string& ptr) {
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(k)) {
        return Bad(absl::StrCat("keyword '", k, "' is supported for integers only"), ptr + "/" + k);
      }
    }
    return NumberRule();
  }

  const Json& doc_;
  std::string root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  absl::flat_hash_set<std::string> defined_, reserved_;
  std::map<std::string, std::string> ref_rules_;
};

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                             std::string_view root_rule) {
  return Converter(schema, grammar_internal::Av(root_rule)).Run();
}

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::json& schema,
                                             std::string_view root_rule) {
  return JsonSchemaToGbnf(nlohmann::ordered_json(schema), root_rule);
}

absl::StatusOr<std::string> JsonSchemaTextToGbnf(std::string_view schema_json,
                                                 std::string_view root_rule) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(schema_json, nullptr, false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("json_schema: not valid JSON");
  return JsonSchemaToGbnf(doc, root_rule);
}

std::string JsonObjectGbnf(std::string_view root_rule) {
  const nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  Converter c(doc, grammar_internal::Av(root_rule));
  // Run() on {} yields any value; build the object rule directly instead.
  std::string obj = c.ObjectAnyRule();
  absl::StatusOr<std::string> rest = c.Run();
  return absl::StrCat(grammar_internal::Av(root_rule), " ::= ", obj, "\n",
                      rest->substr(rest->find('\n') + 1));
}

std::string JsonValueGbnf(std::string_view root_rule) {
  const nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  return *Converter(doc, grammar_internal::Av(root_rule)).Run();
}

}  // namespace tandem
