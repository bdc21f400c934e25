// JSON Schema -> GBNF: each supported keyword (texts the grammar must take and refuse), the
// refusals and their messages, and random walks whose outputs must parse and validate.
#include "model/grammar/json_schema.h"

#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/matcher.h"
#include "tests/model/grammar/grammar_test_util.h"

namespace tandem {
namespace {

using grammar_testing::SchemaValidator;
using grammar_testing::TestVocab;
using ::testing::HasSubstr;

const Vocabulary& Vocab() {
  static const Vocabulary* v = new Vocabulary(TestVocab());
  return *v;
}

class Schema {
 public:
  explicit Schema(const std::string& json) : doc_(nlohmann::ordered_json::parse(json)) {
    absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(doc_);
    EXPECT_TRUE(gbnf.ok()) << gbnf.status() << "\n" << json;
    if (!gbnf.ok()) return;
    gbnf_ = *gbnf;
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = CompileGrammar(gbnf_, Vocab());
    EXPECT_TRUE(g.ok()) << g.status() << "\n" << gbnf_;
    if (g.ok()) grammar_ = *g;
  }
  // The whole text is a complete output of the grammar.
  bool Takes(const std::string& text) const {
    if (grammar_ == nullptr) return false;
    GrammarMatcher m(grammar_);
    return m.AcceptBytes(text).ok() && m.CanTerminate();
  }
  const std::string& gbnf() const { return gbnf_; }
  const std::shared_ptr<const CompiledGrammar>& grammar() const { return grammar_; }
  const nlohmann::ordered_json& doc() const { return doc_; }

 private:
  nlohmann::ordered_json doc_;
  std::string gbnf_;
  std::shared_ptr<const CompiledGrammar> grammar_;
};

std::string Refusal(const std::string& json) {
  absl::StatusOr<std::string> g = JsonSchemaToGbnf(nlohmann::ordered_json::parse(json));
  EXPECT_FALSE(g.ok()) << json;
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(JsonSchemaTest, Primitives) {
  Schema s(R"({"type": "string"})");
  EXPECT_TRUE(s.Takes(R"("héllo \"x\" \\ \n \u00e9")"));
  EXPECT_FALSE(s.Takes(R"("a)"));
  EXPECT_FALSE(s.Takes("\"a\nb\""));     // raw control character
  EXPECT_FALSE(s.Takes(R"("\ud800")"));  // surrogate escape
  Schema i(R"({"type": "integer"})");
  EXPECT_TRUE(i.Takes("0"));
  EXPECT_TRUE(i.Takes("-42"));
  EXPECT_FALSE(i.Takes("042"));
  EXPECT_FALSE(i.Takes("1.5"));
  EXPECT_FALSE(i.Takes("12345678901234567"));  // 17 digits
  Schema n(R"({"type": "number"})");
  EXPECT_TRUE(n.Takes("-0.5e+10"));
  EXPECT_TRUE(n.Takes("3"));
  EXPECT_FALSE(n.Takes("."));
  EXPECT_FALSE(n.Takes("1e"));
  Schema b(R"({"type": "boolean"})");
  EXPECT_TRUE(b.Takes("true"));
  EXPECT_FALSE(b.Takes("True"));
  Schema z(R"({"type": "null"})");
  EXPECT_TRUE(z.Takes("null"));
  Schema t(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(t.Takes("7"));
  EXPECT_TRUE(t.Takes("null"));
  EXPECT_FALSE(t.Takes("\"7\""));
}

TEST(JsonSchemaTest, ObjectsPropertiesRequiredAndOrder) {
  Schema s(R"({"type": "object",
               "properties": {"b": {"type": "integer"}, "a": {"type": "string"}},
               "required": ["a"]})");
  EXPECT_TRUE(s.Takes(R"({"b": 1, "a": "x"})"));
  EXPECT_TRUE(s.Takes(R"({"a":"x"})"));
  EXPECT_TRUE(s.Takes("{\n  \"b\": 1,\n  \"a\": \"x\"\n}"));
  EXPECT_FALSE(s.Takes(R"({"a": "x", "b": 1})"));  // declared order
  EXPECT_FALSE(s.Takes(R"({"b": 1})"));            // a is required
  EXPECT_FALSE(s.Takes(R"({"a": "x", "c": 1})"));  // no additional properties
  EXPECT_FALSE(s.Takes(R"( {"a": "x"})"));         // no leading whitespace
  Schema all_optional(R"({"properties": {"x": {"type": "null"}, "y": {"type": "null"}}})");
  EXPECT_TRUE(all_optional.Takes("{}"));
  EXPECT_TRUE(all_optional.Takes("{ }"));
  EXPECT_TRUE(all_optional.Takes(R"({"y": null})"));
  EXPECT_TRUE(all_optional.Takes(R"({"x": null, "y": null})"));
  EXPECT_FALSE(all_optional.Takes(R"({, "y": null})"));
  EXPECT_FALSE(all_optional.Takes(R"({"x": null,})"));
}

TEST(JsonSchemaTest, WhitespaceIsBounded) {
  Schema s(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  EXPECT_TRUE(s.Takes("{\n" + std::string(20, ' ') + "\"a\": 1\n}"));
  EXPECT_FALSE(s.Takes("{\n" + std::string(21, ' ') + "\"a\": 1\n}"));
  EXPECT_FALSE(s.Takes("{\n\n\"a\": 1}"));
  EXPECT_FALSE(s.Takes("{\"a\":  1}"));
}

TEST(JsonSchemaTest, AdditionalProperties) {
  Schema any(R"({"type": "object"})");
  EXPECT_TRUE(any.Takes(R"({"anything": [1, {"x": null}]})"));
  Schema typed(R"({"type": "object", "properties": {"id": {"type": "integer"}},
                   "additionalProperties": {"type": "boolean"}})");
  EXPECT_TRUE(typed.Takes(R"({"id": 1, "extra": true})"));
  EXPECT_TRUE(typed.Takes(R"({"extra": true, "more": false})"));
  EXPECT_TRUE(typed.Takes(R"({"i": true, "idx": false})"));
  EXPECT_FALSE(typed.Takes(R"({"id": 1, "extra": 1})"));
  EXPECT_FALSE(typed.Takes(R"({"id": 1, "id": true})"));  // extra keys differ from declared
  EXPECT_FALSE(typed.Takes(R"({"extra": true, "id": 1})"));
  Schema open(R"({"properties": {"a": {"const": 1}}, "additionalProperties": true})");
  EXPECT_TRUE(open.Takes(R"({"a": 1, "b": "x"})"));
  Schema closed(R"({"additionalProperties": false})");
  EXPECT_TRUE(closed.Takes("{}"));
  EXPECT_FALSE(closed.Takes(R"({"a": 1})"));
}

TEST(JsonSchemaTest, EnumAndConst) {
  Schema e(R"({"enum": ["red", 2, null, {"k": [1]}, "q\"uote"]})");
  EXPECT_TRUE(e.Takes(R"("red")"));
  EXPECT_TRUE(e.Takes("2"));
  EXPECT_TRUE(e.Takes("null"));
  EXPECT_TRUE(e.Takes(R"({"k":[1]})"));
  EXPECT_TRUE(e.Takes(R"("q\"uote")"));
  EXPECT_FALSE(e.Takes(R"("blue")"));
  Schema typed(R"({"type": "string", "enum": ["a", 1]})");
  EXPECT_TRUE(typed.Takes(R"("a")"));
  EXPECT_FALSE(typed.Takes("1"));
  Schema c(R"({"const": "fixed"})");
  EXPECT_TRUE(c.Takes(R"("fixed")"));
  EXPECT_FALSE(c.Takes(R"("other")"));
}

TEST(JsonSchemaTest, Arrays) {
  Schema s(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  EXPECT_FALSE(s.Takes("[]"));
  EXPECT_TRUE(s.Takes("[1]"));
  EXPECT_TRUE(s.Takes("[1, 2, 3]"));
  EXPECT_TRUE(s.Takes("[\n  1,\n  2\n]"));
  EXPECT_FALSE(s.Takes("[1, 2, 3, 4]"));
  EXPECT_FALSE(s.Takes("[1, \"a\"]"));
  Schema any(R"({"type": "array"})");
  EXPECT_TRUE(any.Takes("[]"));
  EXPECT_TRUE(any.Takes(R"([1, "a", [null]])"));
  Schema prefix(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}],
                    "items": {"type": "boolean"}, "minItems": 1})");
  EXPECT_TRUE(prefix.Takes(R"(["a"])"));
  EXPECT_TRUE(prefix.Takes(R"(["a", 1, true, false])"));
  EXPECT_FALSE(prefix.Takes(R"([1])"));
  EXPECT_FALSE(prefix.Takes(R"(["a", 1, 2])"));
  Schema tuple(R"({"prefixItems": [{"type": "null"}], "items": false})");
  EXPECT_TRUE(tuple.Takes("[null]"));
  EXPECT_TRUE(tuple.Takes("[]"));
  EXPECT_FALSE(tuple.Takes("[null, null]"));
}

TEST(JsonSchemaTest, AnyOfOneOfAllOf) {
  Schema s(R"({"anyOf": [{"type": "integer"}, {"type": "object",
              "properties": {"x": {"type": "string"}}, "required": ["x"]}]})");
  EXPECT_TRUE(s.Takes("5"));
  EXPECT_TRUE(s.Takes(R"({"x": "y"})"));
  EXPECT_FALSE(s.Takes(R"({})"));
  Schema o(R"({"oneOf": [{"type": "string"}, {"type": "null"}]})");
  EXPECT_TRUE(o.Takes("null"));
  Schema a(R"({"allOf": [{"type": "boolean"}], "description": "d"})");
  EXPECT_TRUE(a.Takes("false"));
}

TEST(JsonSchemaTest, RefsAndRecursion) {
  Schema s(R"({"$defs": {"node": {"type": "object",
                "properties": {"v": {"type": "integer"},
                               "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["v"]}},
              "$ref": "#/$defs/node"})");
  EXPECT_TRUE(s.Takes(R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4}]}]})"));
  EXPECT_FALSE(s.Takes(R"({"v": 1, "kids": [{}]})"));
  Schema defs(R"({"definitions": {"c": {"enum": ["r", "g"]}},
                  "type": "object", "properties": {"c": {"$ref": "#/definitions/c"}},
                  "required": ["c"]})");
  EXPECT_TRUE(defs.Takes(R"({"c": "g"})"));
  Schema root(R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"},
                  {"type": "null"}]}}, "required": ["next"]})");
  EXPECT_TRUE(root.Takes(R"({"next": {"next": null}})"));
}

TEST(JsonSchemaTest, StringLengthPatternAndFormat) {
  Schema len(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(len.Takes(R"("a")"));
  EXPECT_TRUE(len.Takes(R"("ab")"));
  EXPECT_TRUE(len.Takes(R"("é\n日")"));  // three characters
  EXPECT_FALSE(len.Takes(R"("abcd")"));
  Schema pat(R"({"type": "string", "pattern": "^[a-z]+-\\d{2}$"})");
  EXPECT_TRUE(pat.Takes(R"("ab-12")"));
  EXPECT_FALSE(pat.Takes(R"("ab-1")"));
  Schema search(R"({"type": "string", "pattern": "x\"y"})");  // unanchored: a search
  EXPECT_TRUE(search.Takes(R"("aax\"ybb")"));
  EXPECT_FALSE(search.Takes(R"("aaxybb")"));
  Schema date(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(date.Takes(R"("2024-01-31T12:30:00Z")"));
  EXPECT_FALSE(date.Takes(R"("2024-13-01T12:30:00Z")"));
  Schema uuid(R"({"format": "uuid"})");
  EXPECT_TRUE(uuid.Takes(R"("123e4567-e89b-12d3-a456-426614174000")"));
  Schema other(R"({"type": "string", "format": "uri"})");  // an annotation only
  EXPECT_TRUE(other.Takes(R"("anything")"));
}

TEST(JsonSchemaTest, IntegerBounds) {
  Schema s(R"({"type": "integer", "minimum": -12, "exclusiveMaximum": 105})");
  for (int v = -30; v <= 130; ++v) {
    EXPECT_EQ(s.Takes(std::to_string(v)), v >= -12 && v < 105) << v;
  }
  EXPECT_FALSE(s.Takes("-0"));
  Schema big(R"({"type": "integer", "minimum": 1000, "maximum": 123456})");
  EXPECT_TRUE(big.Takes("1000"));
  EXPECT_TRUE(big.Takes("99999"));
  EXPECT_TRUE(big.Takes("123456"));
  EXPECT_FALSE(big.Takes("123457"));
  EXPECT_FALSE(big.Takes("999"));
  Schema neg(R"({"type": "integer", "maximum": -3})");
  EXPECT_TRUE(neg.Takes("-3"));
  EXPECT_TRUE(neg.Takes("-1000"));
  EXPECT_FALSE(neg.Takes("-2"));
  EXPECT_FALSE(neg.Takes("0"));
}

TEST(JsonSchemaTest, RefusalsNameKeywordAndPointer) {
  EXPECT_EQ(Refusal(R"({"type": "object", "properties": {"tags": {"type": "object",
                       "patternProperties": {"x": {}}}}})"),
            "json_schema: unsupported keyword 'patternProperties' at /properties/tags");
  EXPECT_EQ(Refusal(R"({"type": "array", "uniqueItems": true})"),
            "json_schema: unsupported keyword 'uniqueItems' at /");
  EXPECT_EQ(Refusal(R"({"items": {"not": {}}})"),
            "json_schema: unsupported keyword 'not' at /items");
  EXPECT_EQ(Refusal(R"({"properties": {"a/b": {"if": {}}}})"),
            "json_schema: unsupported keyword 'if' at /properties/a~1b");
  EXPECT_EQ(Refusal(R"({"anyOf": [{}, {"minProperties": 1}]})"),
            "json_schema: unsupported keyword 'minProperties' at /anyOf/1");
  EXPECT_THAT(Refusal(R"({"type": "number", "minimum": 0.5})"),
              HasSubstr("'minimum' is supported for integers only at /minimum"));
  EXPECT_THAT(Refusal(R"J({"type": "string", "pattern": "(?=a)"})J"),
              HasSubstr("lookahead is not supported"));
  EXPECT_THAT(Refusal(R"({"$ref": "#/$defs/missing"})"), HasSubstr("not found"));
  EXPECT_THAT(Refusal(R"({"$ref": "http://x/y"})"), HasSubstr("only local references"));
  EXPECT_THAT(Refusal(R"({"type": "integer", "minimum": 5, "maximum": 4})"),
              HasSubstr("no integer satisfies"));
  EXPECT_THAT(Refusal(R"({"type": "strin"})"), HasSubstr("unknown type 'strin'"));
  EXPECT_THAT(Refusal("false"), HasSubstr("matches nothing"));
}

TEST(JsonSchemaTest, RuleNamesArePrefixedSoSchemasCombine) {
  absl::StatusOr<std::string> a = JsonSchemaToGbnf(
      nlohmann::json::parse(R"({"type": "object", "properties": {"x": {"type": "string"}}})"),
      "tool-a");
  absl::StatusOr<std::string> b =
      JsonSchemaToGbnf(nlohmann::json::parse(R"({"type": "array"})"), "tool-b");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string combined = "root ::= tool-a | tool-b\n" + *a + *b;
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = CompileGrammar(combined, Vocab());
  ASSERT_TRUE(g.ok()) << g.status() << "\n" << combined;
  GrammarMatcher m(*g);
  EXPECT_TRUE(m.AcceptBytes(R"({"x": "1"})").ok());
  EXPECT_TRUE(m.CanTerminate());
}

TEST(JsonSchemaTest, JsonObjectGrammar) {
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g =
      CompileGrammar(JsonObjectGbnf(), Vocab());
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g);
  EXPECT_FALSE(GrammarMatcher(*g).AcceptBytes("[1]").ok());
  EXPECT_TRUE(m.AcceptBytes(R"({"a": [1, 2.5e3, "x", true, null, {}]})").ok());
  EXPECT_TRUE(m.IsTerminated());
}

TEST(JsonSchemaTest, TextOverloadKeepsPropertyOrder) {
  absl::StatusOr<std::string> g =
      JsonSchemaTextToGbnf(R"({"properties": {"z": {"type": "null"}, "a": {"type": "null"}},
                               "required": ["z", "a"]})");
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> c = CompileGrammar(*g, Vocab());
  ASSERT_TRUE(c.ok());
  GrammarMatcher m(*c);
  EXPECT_TRUE(m.AcceptBytes(R"({"z": null, "a": null})").ok());
  EXPECT_FALSE(JsonSchemaTextToGbnf("{not json").ok());
}

// Random walks on a fixed set of schemas (the property test does random schemas on SmolLM2).
TEST(JsonSchemaTest, WalkedOutputsParseAndValidate) {
  const char* schemas[] = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
          "age": {"type": "integer", "minimum": 0, "maximum": 150},
          "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,4}$"},
                   "maxItems": 3},
          "kind": {"enum": ["a", "b"]}}, "required": ["name", "kind"],
          "additionalProperties": {"type": "number"}})",
      R"({"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}]})",
      R"({"oneOf": [{"type": "boolean"}, {"type": "string", "minLength": 1}]})",
      R"({"type": "object"})",
  };
  std::mt19937_64 rng(3);
  for (const char* text : schemas) {
    Schema s(text);
    ASSERT_NE(s.grammar(), nullptr);
    SchemaValidator validator(s.doc());
    int finished = 0;
    for (int i = 0; i < 60; ++i) {
      grammar_testing::WalkResult r =
          RandomWalk(GrammarMatcher(s.grammar()), Vocab(), rng, grammar_testing::WalkOptions{});
      if (!r.finished) continue;
      ++finished;
      nlohmann::json v = nlohmann::json::parse(r.text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << text << "\n" << r.text;
      EXPECT_EQ(validator.Check(v), "") << text << "\n" << r.text;
    }
    EXPECT_GT(finished, 30) << text;
  }
}

}  // namespace
}  // namespace tandem
