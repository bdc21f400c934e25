// Issue 25 item 2 at engine level, on SmolLM2's real vocabulary (label `model`; TANDEM_MODEL names
// the GGUF; skipped visibly without it):
//  * random schemas over the supported keywords until 1,000 walks finished; for each, a walk that
//  picks
//    random allowed tokens under random "temperatures" (bias toward short or long tokens, toward
//    closing strings and containers, toward stopping) until the grammar is terminated or may end
//    and a random stop is drawn. Every finished output must parse and validate against its
//    schema. Prints RESULT grammar_property_generations_invalid=<invalid>/<finished>.
//  * random regexes the same way, checked with std::regex_match (wide, so code points count).
//  * mask exactness against brute force on states of a real schema.
#include <chrono>
#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "model/grammar/regex.h"
#include "model/tokenizer/gguf_tokenizer.h"
#include "tests/model/format/model_env.h"
#include "tests/model/grammar/grammar_test_util.h"

namespace tandem {
namespace {

using grammar_testing::RandomWalk;
using grammar_testing::RegexOnLargeStack;
using grammar_testing::SchemaValidator;
using grammar_testing::WalkOptions;
using grammar_testing::WalkResult;
using grammar_testing::Widen;
using Json = nlohmann::ordered_json;

const Vocabulary* RealVocab() {
  static const Vocabulary* v = []() -> const Vocabulary* {
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(::tandem::testing::ModelPath());
    if (!f.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromGguf(**f);
    if (!t.ok()) return nullptr;
    return new Vocabulary(Vocabulary::FromTokenizer(**t));
  }();
  return v;
}

class GrammarPropertyTest : public ::tandem::testing::RealModelTest {
 protected:
  void SetUp() override {
    RealModelTest::SetUp();
    if (IsSkipped()) return;
    vocab_ = RealVocab();
    ASSERT_NE(vocab_, nullptr) << "cannot load the tokenizer from "
                               << ::tandem::testing::ModelPath();
  }
  const Vocabulary* vocab_ = nullptr;
};

// ---- Random schemas ----------------------------------------------------------------------------

class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}

  Json Root() {
    defs_ = Json::object();
    Json s = depth_pick(3) == 0 ? Any(0) : Object(0);
    if (!defs_.empty()) s["$defs"] = defs_;
    return s;
  }

 private:
  int Pick(int n) { return static_cast<int>(rng_() % n); }
  int depth_pick(int n) { return Pick(n); }
  bool Coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  std::string Name() {
    static const char* names[] = {"id",   "name",   "value", "type",  "items", "a",       "b",
                                  "é",    "x y",    "data",  "tags",  "count", "enabled", "créé",
                                  "k\"q", "nested", "url",   "score", "desc",  "idx"};
    return names[Pick(20)];
  }

  Json Scalar() {
    switch (Pick(6)) {
      case 0:
        return "str" + std::to_string(Pick(5));
      case 1:
        return Pick(200) - 50;
      case 2:
        return Coin() ? 1.5 : -0.25;
      case 3:
        return Coin();
      case 4:
        return nullptr;
      default:
        return "é\"\\x";
    }
  }

  Json Any(int depth) {
    const int max = depth >= 4 ? 8 : 14;
    switch (Pick(max)) {
      case 0:
        return Json{{"type", "string"}};
      case 1: {
        Json s{{"type", "string"}};
        const int lo = Pick(4);
        if (Coin()) s["minLength"] = lo;
        if (Coin()) s["maxLength"] = lo + Pick(6);
        return s;
      }
      case 2: {
        static const char* patterns[] = {
            "^[a-z]{1,6}$",   "^\\d{3}-\\d{2}$", "ab", "^(x|yz)+$", "^[A-Z][a-z]*( [A-Z][a-z]*)?$",
            "\\w+@\\w+\\.com"};
        return Json{{"type", "string"}, {"pattern", patterns[Pick(6)]}};
      }
      case 3: {
        static const char* formats[] = {"date", "time", "date-time", "uuid", "email", "ipv4"};
        return Json{{"type", "string"}, {"format", formats[Pick(6)]}};
      }
      case 4: {
        Json s{{"type", "integer"}};
        const int lo = Pick(100) - 50;
        if (Coin()) s[Coin() ? "minimum" : "exclusiveMinimum"] = lo;
        if (Coin()) s[Coin() ? "maximum" : "exclusiveMaximum"] = lo + 2 + Pick(1000);
        return s;
      }
      case 5:
        return Json{{"type", "number"}};
      case 6:
        return Json{{"type", Coin() ? "boolean" : "null"}};
      case 7: {
        Json e = Json::array();
        const int n = 1 + Pick(4);
        for (int i = 0; i < n; ++i) e.push_back(Scalar());
        return Json{{"enum", e}};
      }
      case 8:
        return Json{{"const", Scalar()}};
      case 9:
        return Json{{"type", Json::array({"string", Coin() ? "null" : "integer"})}};
      case 10:
        return Array(depth + 1);
      case 11:
        return Object(depth + 1);
      case 12: {
        Json branches = Json::array();
        const int n = 2 + Pick(2);
        for (int i = 0; i < n; ++i) branches.push_back(Any(depth + 1));
        return Json{{"anyOf", branches}};
      }
      default: {
        // oneOf with branches of different types, so exactly one matches.
        static const char* types[] = {"string", "integer", "boolean", "null", "array", "object"};
        std::vector<int> order = {0, 1, 2, 3, 4, 5};
        std::shuffle(order.begin(), order.end(), rng_);
        Json branches = Json::array();
        for (int i = 0; i < 2; ++i) {
          const std::string t = types[order[i]];
          if (t == "array") {
            branches.push_back(
                Json{{"type", "array"}, {"items", Json{{"type", "integer"}}}, {"maxItems", 2}});
          } else if (t == "object") {
            branches.push_back(Json{{"type", "object"},
                                    {"properties", Json{{"k", Json{{"type", "integer"}}}}},
                                    {"required", Json::array({"k"})}});
          } else {
            branches.push_back(Json{{"type", t}});
          }
        }
        return Json{{"oneOf", branches}};
      }
    }
  }

  Json Array(int depth) {
    Json s{{"type", "array"}};
    if (Coin(0.3)) {
      Json prefix = Json::array();
      const int n = 1 + Pick(3);
      for (int i = 0; i < n; ++i) prefix.push_back(Any(depth + 1));
      s["prefixItems"] = prefix;
      if (Coin()) s["items"] = Coin() ? Json(false) : Any(depth + 1);
    } else {
      s["items"] = Any(depth + 1);
    }
    const int lo = Pick(3);
    if (Coin()) s["minItems"] = lo;
    if (Coin()) s["maxItems"] = lo + Pick(4);
    if (s.contains("prefixItems") && s.contains("items") && s["items"] == Json(false) &&
        s.contains("minItems") && s["minItems"].get<size_t>() > s["prefixItems"].size()) {
      s.erase("minItems");
    }
    return s;
  }

  Json Object(int depth) {
    if (depth < 3 && Coin(0.15)) return Recursive();
    Json props = Json::object();
    const int n = Pick(depth == 0 ? 7 : 4);
    Json required = Json::array();
    for (int i = 0; i < n; ++i) {
      const std::string name = Name();
      if (props.contains(name)) continue;
      props[name] = depth >= 4 ? Json{{"type", "integer"}} : Any(depth + 1);
      if (Coin(0.6)) required.push_back(name);
    }
    Json s{{"type", "object"}, {"properties", props}};
    if (!required.empty()) s["required"] = required;
    switch (Pick(4)) {
      case 0:
        s["additionalProperties"] = false;
        break;
      case 1:
        s["additionalProperties"] = true;
        break;
      case 2:
        s["additionalProperties"] = Json{{"type", Coin() ? "integer" : "string"}};
        break;
      default:
        break;
    }
    if (Coin(0.1)) s["description"] = "ignored";
    return s;
  }

  // A tree node through $defs (recursion; optional children so it can end).
  Json Recursive() {
    const std::string name = "node" + std::to_string(defs_.size());
    defs_[name] =
        Json{{"type", "object"},
             {"properties", Json{{"v", Json{{"type", "integer"}}},
                                 {"kids", Json{{"type", "array"},
                                               {"items", Json{{"$ref", "#/$defs/" + name}}},
                                               {"maxItems", 2}}}}},
             {"required", Json::array({"v"})},
             {"additionalProperties", false}};
    return Json{{"$ref", "#/$defs/" + name}};
  }

  std::mt19937_64 rng_;
  Json defs_;
};

WalkOptions RandomTemperature(std::mt19937_64& rng) {
  WalkOptions o;
  std::uniform_real_distribution<double> u(0, 1);
  o.length_bias = u(rng) * 4 - 2;  // short tokens (< 0) .. long tokens (> 0)
  o.closer_bias = 0.1 + u(rng) * 0.6;
  o.stop_chance = 0.05 + u(rng) * 0.9;
  o.max_steps = 600;
  return o;
}

TEST_F(GrammarPropertyTest, RandomSchemasGenerateValidJson) {
  // Schemas until 1,000 walks finished (a walk may hit the step bound, like finish_reason
  // "length"; those are counted, not validated).
  const int kGenerations = 1000, kMaxSchemas = 1300;
  int finished = 0, invalid = 0, unfinished = 0, schemas = 0;
  double compile_ms = 0;
  std::mt19937_64 rng(2025);
  for (int i = 0; i < kMaxSchemas && finished < kGenerations; ++i) {
    ++schemas;
    SchemaGen gen(1000 + i);
    const Json schema = gen.Root();
    absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema);
    ASSERT_TRUE(gbnf.ok()) << gbnf.status() << "\n" << schema.dump(2);
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = CompileGrammar(*gbnf, *vocab_);
    compile_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << schema.dump(2) << "\n" << *gbnf;
    const SchemaValidator validator(schema);
    const WalkResult r = RandomWalk(GrammarMatcher(*g), *vocab_, rng, RandomTemperature(rng));
    if (!r.finished) {
      ++unfinished;
      continue;
    }
    ++finished;
    const nlohmann::json v = nlohmann::json::parse(r.text, nullptr, false);
    std::string why = v.is_discarded() ? "does not parse" : validator.Check(v);
    if (!why.empty()) {
      ++invalid;
      ADD_FAILURE() << why << "\nschema: " << schema.dump() << "\noutput: " << r.text;
    }
  }
  std::printf("RESULT grammar_property_generations_invalid=%d/%d\n", invalid, finished);
  std::printf("RESULT grammar_property_generations_unfinished=%d (step bound 600) of %d schemas\n",
              unfinished, schemas);
  std::printf("RESULT grammar_property_mean_compile_ms=%.2f\n", compile_ms / schemas);
  EXPECT_EQ(invalid, 0);
  EXPECT_GE(finished, kGenerations);
}

TEST_F(GrammarPropertyTest, RandomRegexesGenerateMatches) {
  static const char* pieces[] = {"[a-z]",   "\\d", "\\w",      "[^a-y]", "x",
                                 "(ab|cd)", "\\.", "[A-F0-9]", "é",      "(?:-\\d)"};
  static const char* quants[] = {"", "", "?", "*", "+", "{2}", "{1,3}", "{0,}"};
  std::mt19937_64 rng(77);
  int finished = 0, invalid = 0;
  for (int i = 0; i < 300; ++i) {
    std::string re;
    const int n = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < n; ++k) {
      re += pieces[rng() % 10];
      re += quants[rng() % 8];
    }
    if (rng() % 4 == 0) re = "(" + re + ")|" + pieces[rng() % 10];
    absl::StatusOr<std::string> gbnf = RegexToGbnf(re);
    ASSERT_TRUE(gbnf.ok()) << gbnf.status() << " " << re;
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = CompileGrammar(*gbnf, *vocab_);
    ASSERT_TRUE(g.ok()) << g.status();
    const std::wregex wre(Widen(re), std::regex::ECMAScript);
    for (int w = 0; w < 3; ++w) {
      WalkOptions o = RandomTemperature(rng);
      o.closer_bias = 0;
      const WalkResult r = RandomWalk(GrammarMatcher(*g), *vocab_, rng, o);
      if (!r.finished) continue;
      ++finished;
      if (!RegexOnLargeStack(Widen(r.text), wre, /*search=*/false)) {
        ++invalid;
        ADD_FAILURE() << re << " on \"" << r.text << "\"";
      }
    }
  }
  std::printf("RESULT grammar_regex_generations_invalid=%d/%d\n", invalid, finished);
  EXPECT_EQ(invalid, 0);
  EXPECT_GT(finished, 600);
}

TEST_F(GrammarPropertyTest, MaskIsExactOnRealVocabulary) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 130},
      "email": {"type": "string", "format": "email"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", "c d"]}, "maxItems": 4},
      "bio": {"type": "string", "maxLength": 12}},
      "required": ["name", "age"], "additionalProperties": {"type": "number"}})");
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g =
      CompileGrammar(*JsonSchemaToGbnf(schema), *vocab_);
  ASSERT_TRUE(g.ok()) << g.status();
  std::mt19937_64 rng(9);
  int states = 0;
  for (int walk = 0; walk < 3; ++walk) {
    GrammarMatcher m(*g);
    WalkOptions o;
    o.length_bias = walk - 1.0;
    o.stop_chance = 0;
    for (int step = 0; step < 12 && !m.IsTerminated(); ++step) {
      std::vector<uint64_t> mask;
      m.FillAllowedMask(&mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab_->size(); ++t) {
        const bool bit = (mask[t >> 6] >> (t & 63)) & 1;
        GrammarMatcher copy = m;
        const bool brute =
            copy.AcceptBytes(vocab_->TokenBytes(t)).ok() && !vocab_->IsNeverAllowed(t);
        ASSERT_EQ(bit, brute) << "walk " << walk << " step " << step << " token " << t << " \""
                              << vocab_->TokenBytes(t) << "\"";
        ASSERT_EQ(m.IsAllowed(t), bit) << t;
        if (bit) allowed.push_back(t);
      }
      ++states;
      if (allowed.empty()) break;
      ASSERT_TRUE(m.Accept(allowed[rng() % allowed.size()]).ok());
    }
  }
  EXPECT_GE(states, 20);
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) { return ::tandem::testing::RunModelTests(argc, argv); }
