// Shared by the grammar tests: a small byte vocabulary, a brute-force allowed check, random
// constrained walks, and a JSON Schema validator for the subset model/grammar/ supports.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "model/grammar/matcher.h"
#include "model/grammar/vocabulary.h"
#include "model/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace tandem::grammar_testing {

// std::regex_match (search: std::regex_search) of `text`, run on a thread with a 1 GiB stack:
// libstdc++'s regex executor recurses once or more per character, and a long generated text
// overflows the 8 MiB main stack under AddressSanitizer's larger frames (the stack is reserved,
// not touched: only the depth actually used is backed by memory).
inline bool RegexOnLargeStack(const std::wstring& text, const std::wregex& re, bool search) {
  struct Call {
    const std::wstring* text;
    const std::wregex* re;
    bool search;
    bool matched = false;
  } call{&text, &re, search};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{1} << 30);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      +[](void* p) -> void* {
        Call& c = *static_cast<Call*>(p);
        c.matched = c.search ? std::regex_search(*c.text, *c.re) : std::regex_match(*c.text, *c.re);
        return nullptr;
      },
      &call);
  pthread_attr_destroy(&attr);
  if (rc != 0) std::abort();  // no thread: the test cannot check anything
  pthread_join(thread, nullptr);
  return call.matched;
}

// Every single byte, pieces of JSON, multi-byte and partial UTF-8 tokens, an empty token and a
// special one (never allowed).
inline Vocabulary TestVocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s :
       {"{\"",  "\":",   "\",",  "\"}",   "\"]",  "true",     "false",      "null", " \"", "\n  ",
        "\n",   "  ",    "ab",   "abc",   "name", "\"name",   "\": \"",     "12",   "3.5", "-1",
        "e+",   "é",     "\xC3", "\xA9x", "é\"",  "[{",       "}]",         "},",   "], ", ", \"",
        "\\n",  "\\u00", "\\\"", "日本",  "😀",    "\xF0\x9F", "\x98\x80\"", "[1",   "0,",  "00",
        "x\":", "{}",    "[]",   "\"\"",  "a-b",  "2024-01-", "T12:"}) {
    bytes.push_back(s);
  }
  bytes.push_back("");            // empty: never allowed
  bytes.push_back("<|im_end|>");  // special
  std::vector<bool> never(bytes.size(), false);
  never.back() = true;
  return *Vocabulary::FromTokenBytes(std::move(bytes), std::move(never));
}

inline bool BruteAllowed(const GrammarMatcher& m, int32_t token) {
  GrammarMatcher copy = m;
  return copy.Accept(token).ok();
}

struct WalkOptions {
  int max_steps = 3000;
  double length_bias = 0;    // weight = len^bias (negative: short tokens)
  double closer_bias = 0.3;  // chance to pick among tokens with '"', '}' or ']' when any
  double stop_chance = 0.3;  // chance to stop when CanTerminate
};

struct WalkResult {
  bool finished = false;  // stopped where the grammar may end
  std::string text;
  std::vector<int32_t> tokens;
};

inline WalkResult RandomWalk(GrammarMatcher m, const Vocabulary& vocab, std::mt19937_64& rng,
                             const WalkOptions& opt) {
  // What a step needs of each token, computed once per walk rather than per step (a real
  // vocabulary has ~49k tokens and a walk hundreds of steps): whether it closes a string, object
  // or array, and its weight len^length_bias (from a table by length: the same doubles std::pow
  // gives per token, so the draws are unchanged).
  const int32_t vocab_size = vocab.size();
  std::vector<uint8_t> is_closer(vocab_size);
  std::vector<uint32_t> length(vocab_size);
  size_t max_length = 0;
  for (int32_t t = 0; t < vocab_size; ++t) {
    const std::string_view b = vocab.TokenBytes(t);
    is_closer[t] = b.find_first_of("\"}]") != std::string_view::npos;
    length[t] = static_cast<uint32_t>(b.size());
    max_length = std::max(max_length, b.size());
  }
  std::vector<double> weight_of_length(max_length + 1);
  for (size_t n = 0; n <= max_length; ++n) {
    weight_of_length[n] = std::pow(static_cast<double>(n), opt.length_bias);
  }
  WalkResult r;
  std::vector<uint64_t> mask;
  std::vector<int32_t> allowed, closers;
  std::vector<double> weights;
  std::uniform_real_distribution<double> u(0, 1);
  for (int step = 0; step < opt.max_steps; ++step) {
    if (m.IsTerminated() || (m.CanTerminate() && u(rng) < opt.stop_chance)) {
      r.finished = m.CanTerminate();
      return r;
    }
    m.FillAllowedMask(&mask);
    allowed.clear();
    closers.clear();
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint64_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        const int32_t t = static_cast<int32_t>(w * 64) + std::countr_zero(bits);
        if (t >= vocab_size) break;
        allowed.push_back(t);
        if (is_closer[t]) closers.push_back(t);
      }
    }
    if (allowed.empty()) {
      r.finished = m.CanTerminate();
      return r;
    }
    const std::vector<int32_t>& pool =
        (!closers.empty() && u(rng) < opt.closer_bias) ? closers : allowed;
    weights.clear();
    for (int32_t t : pool) weights.push_back(weight_of_length[length[t]]);
    std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
    const int32_t t = pool[pick(rng)];
    if (!m.Accept(t).ok()) return r;  // a mask bug; the caller sees finished == false
    r.tokens.push_back(t);
    r.text += vocab.TokenBytes(t);
  }
  return r;
}

// ---- JSON Schema validation (the subset model/grammar/ compiles) ------------------------------

inline std::wstring Widen(const std::string& utf8) {
  std::wstring out;
  size_t i = 0;
  while (i < utf8.size()) {
    const Utf8Step s = ScanUtf8(absl::string_view(utf8).substr(i));
    if (s.status != Utf8Status::kComplete) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(static_cast<wchar_t>(s.codepoint));
      i += s.length;
    }
  }
  return out;
}

inline size_t CodePoints(const std::string& utf8) { return Widen(utf8).size(); }

class SchemaValidator {
 public:
  explicit SchemaValidator(const nlohmann::ordered_json& root) : root_(root) {}

  // "" when valid, else why not.
  std::string Check(const nlohmann::json& v) const { return Check(v, root_, "", 0); }

 private:
  static std::string TypeOf(const nlohmann::json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
  }
  static bool HasType(const nlohmann::json& v, const std::string& t) {
    if (t == "number") return v.is_number();
    if (t == "integer") {
      return v.is_number_integer() ||
             (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    }
    return TypeOf(v) == t;
  }

  std::string Check(const nlohmann::json& v, const nlohmann::ordered_json& s, const std::string& at,
                    int depth) const {
    if (depth > 200) return "too deep";
    if (s.is_boolean()) return s.get<bool>() ? "" : at + ": schema false";
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"].get<std::string>();
      const nlohmann::ordered_json& target =
          root_.at(nlohmann::json_pointer<std::string>(ref.substr(1)));
      return Check(v, target, at, depth + 1);
    }
    if (s.contains("allOf")) {
      for (const auto& sub : s["allOf"]) {
        std::string e = Check(v, sub, at, depth + 1);
        if (!e.empty()) return e;
      }
    }
    if (s.contains("anyOf")) {
      bool any = false;
      for (const auto& sub : s["anyOf"]) any = any || Check(v, sub, at, depth + 1).empty();
      if (!any) return at + ": no anyOf branch matches";
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const auto& sub : s["oneOf"]) n += Check(v, sub, at, depth + 1).empty();
      if (n != 1) return at + ": " + std::to_string(n) + " oneOf branches match";
    }
    if (s.contains("const") && nlohmann::json(s["const"]) != v) return at + ": not the const";
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s["enum"]) found = found || nlohmann::json(e) == v;
      if (!found) return at + ": not in enum";
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) {
        ok = HasType(v, s["type"].get<std::string>());
      } else {
        for (const auto& t : s["type"]) ok = ok || HasType(v, t.get<std::string>());
      }
      if (!ok) return at + ": type " + TypeOf(v) + " not allowed";
    }
    if (v.is_object()) {
      std::set<std::string> declared;
      if (s.contains("properties")) {
        for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
          declared.insert(it.key());
          if (v.contains(it.key())) {
            std::string e = Check(v[it.key()], it.value(), at + "/" + it.key(), depth + 1);
            if (!e.empty()) return e;
          }
        }
      }
      if (s.contains("required")) {
        for (const auto& r : s["required"]) {
          if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
        }
      }
      if (s.contains("additionalProperties")) {
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (declared.count(it.key())) continue;
          std::string e =
              Check(it.value(), s["additionalProperties"], at + "/" + it.key(), depth + 1);
          if (!e.empty()) return e;
        }
      }
    }
    if (v.is_array()) {
      size_t k = 0;
      if (s.contains("prefixItems")) {
        k = s["prefixItems"].size();
        for (size_t i = 0; i < k && i < v.size(); ++i) {
          std::string e = Check(v[i], s["prefixItems"][i], at + "/" + std::to_string(i), depth + 1);
          if (!e.empty()) return e;
        }
      }
      if (s.contains("items")) {
        for (size_t i = k; i < v.size(); ++i) {
          std::string e = Check(v[i], s["items"], at + "/" + std::to_string(i), depth + 1);
          if (!e.empty()) return e;
        }
      }
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
        return at + ": minItems";
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
        return at + ": maxItems";
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      const size_t n = CodePoints(str);
      if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return at + ": minLength";
      if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return at + ": maxLength";
      if (s.contains("pattern")) {
        const std::wregex re(Widen(s["pattern"].get<std::string>()), std::regex::ECMAScript);
        if (!RegexOnLargeStack(Widen(str), re, /*search=*/true)) return at + ": pattern";
      }
    }
    if (v.is_number()) {
      const double d = v.get<double>();
      if (s.contains("minimum") && d < s["minimum"].get<double>()) return at + ": minimum";
      if (s.contains("maximum") && d > s["maximum"].get<double>()) return at + ": maximum";
      if (s.contains("exclusiveMinimum") && d <= s["exclusiveMinimum"].get<double>()) {
        return at + ": exclusiveMinimum";
      }
      if (s.contains("exclusiveMaximum") && d >= s["exclusiveMaximum"].get<double>()) {
        return at + ": exclusiveMaximum";
      }
    }
    return "";
  }

  const nlohmann::ordered_json& root_;
};

}  // namespace tandem::grammar_testing
