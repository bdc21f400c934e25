// GBNF parsing: the syntax, desugaring, and errors naming line and column.
#include "model/grammar/gbnf.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

std::string Error(std::string_view text) {
  absl::StatusOr<GbnfGrammar> g = ParseGbnf(text);
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(GbnfTest, ParsesLlamaCppJsonGrammar) {
  // llama.cpp's grammars/json.gbnf (multi-line rules, groups, classes, repetitions, comments).
  const char* text = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)";
  absl::StatusOr<GbnfGrammar> g = ParseGbnf(text);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->rules[g->root].name, "root");
  EXPECT_GE(g->FindRule("ws"), 0);
  // The text it prints parses again to the same text.
  absl::StatusOr<GbnfGrammar> again = ParseGbnf(g->ToString());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << g->ToString();
  EXPECT_EQ(again->ToString(), g->ToString());
}

TEST(GbnfTest, LiteralsClassesAndEscapes) {
  absl::StatusOr<GbnfGrammar> g =
      ParseGbnf("root ::= \"a\\n\\x41\\u00e9\\U0001F600é\" [^a-c\\]] . [\\-]");
  ASSERT_TRUE(g.ok()) << g.status();
  const GbnfSequence& seq = g->rules[g->root].alternatives[0];
  ASSERT_EQ(seq.size(), 9u);
  EXPECT_EQ(seq[0].ranges[0].lo, 'a');
  EXPECT_EQ(seq[1].ranges[0].lo, '\n');
  EXPECT_EQ(seq[2].ranges[0].lo, 'A');
  EXPECT_EQ(seq[3].ranges[0].lo, 0xE9u);
  EXPECT_EQ(seq[4].ranges[0].lo, 0x1F600u);
  EXPECT_EQ(seq[5].ranges[0].lo, 0xE9u);
  EXPECT_TRUE(seq[6].negated);
  ASSERT_EQ(seq[6].ranges.size(), 2u);
  EXPECT_EQ(seq[6].ranges[1].lo, static_cast<uint32_t>(']'));
  EXPECT_TRUE(seq[7].negated);
  EXPECT_TRUE(seq[7].ranges.empty());
  EXPECT_EQ(seq[8].ranges[0].lo, static_cast<uint32_t>('-'));
}

TEST(GbnfTest, RepetitionsDesugarIntoRules) {
  absl::StatusOr<GbnfGrammar> g =
      ParseGbnf("root ::= \"ab\"{2,4} x? x* x+ x{1} [0-9]{3,} (x | \"y\"){0,200}\nx ::= \"x\"");
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string text = g->ToString();
  // Counted repetitions are one rule with a counter, not copies.
  EXPECT_THAT(text, HasSubstr("::= ( \"ab\" ){2,4}"));
  EXPECT_THAT(text, HasSubstr("::= ( [0-9] ){3,}"));
  EXPECT_THAT(text, HasSubstr("::= ( x | \"y\" ){0,200}"));
  int repeats = 0;
  for (const GbnfRule& r : g->rules) repeats += r.repeat;
  EXPECT_EQ(repeats, 3);
  absl::StatusOr<GbnfGrammar> again = ParseGbnf(text);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(again->ToString(), text);
  // A rule that is only a repetition is the repetition.
  absl::StatusOr<GbnfGrammar> r = ParseGbnf("root ::= (\"a\" | \"bc\"){2,3}");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->rules.size(), 1u);
  EXPECT_TRUE(r->rules[0].repeat);
  EXPECT_EQ(r->rules[0].repeat_min, 2);
  EXPECT_EQ(r->rules[0].repeat_max, 3);
  EXPECT_EQ(r->rules[0].alternatives.size(), 2u);
}

TEST(GbnfTest, GeneratedNamesDoNotCollideWithUserRules) {
  absl::StatusOr<GbnfGrammar> g = ParseGbnf("root ::= (\"a\")* root-1\nroot-1 ::= \"b\"");
  ASSERT_TRUE(g.ok()) << g.status();
  int roots1 = 0;
  for (const GbnfRule& r : g->rules) roots1 += r.name == "root-1";
  EXPECT_EQ(roots1, 1);
  EXPECT_TRUE(ParseGbnf(g->ToString()).ok());
}

TEST(GbnfTest, ErrorsNameLineAndColumn) {
  EXPECT_EQ(Error("root ::= foo"), "gbnf: line 1, column 10: undefined rule 'foo'");
  EXPECT_EQ(Error("root ::= \"a\"\n  | [a-"),
            "gbnf: line 2, column 5: unterminated character class");
  EXPECT_EQ(Error("root ::= \"abc"), "gbnf: line 1, column 10: unterminated literal");
  EXPECT_EQ(Error("root ::= (\"a\""), "gbnf: line 1, column 14: missing ')'");
  EXPECT_EQ(Error("root ::= \"a\")"), "gbnf: line 1, column 13: unmatched ')'");
  EXPECT_EQ(Error("root ::= \"\\q\""), "gbnf: line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(Error("root ::= [z-a]"),
            "gbnf: line 1, column 13: range end U+0061 is below its start U+007A");
  EXPECT_EQ(Error("root ::= \"a\"{3,2}"),
            "gbnf: line 1, column 13: repetition {3,2} has max < min");
  EXPECT_EQ(Error("root ::= \"a\"{20000}"),
            "gbnf: line 1, column 13: repetition count above 10000");
  EXPECT_EQ(Error("root \"a\""), "gbnf: line 1, column 6: expected '::=' after rule name 'root'");
  EXPECT_EQ(Error("root ::= \"a\"\nroot ::= \"b\""),
            "gbnf: line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(Error("root ::= \"\\uD800\""),
            "gbnf: line 1, column 11: U+D800 is a surrogate, not a character");
  EXPECT_EQ(Error("x ::= \"a\""), "gbnf: the grammar has no rule 'root' (the start rule)");
  EXPECT_EQ(Error("root ::= @"), "gbnf: line 1, column 10: unexpected '@'");
}

TEST(GbnfTest, RefusesUnproductiveAndLeftRecursiveRules) {
  EXPECT_THAT(Error("root ::= a\na ::= \"x\" a"),
              HasSubstr("line 2, column 1: rule 'a' matches no finite text"));
  EXPECT_THAT(Error("root ::= a\na ::= a \"x\" | \"y\""),
              HasSubstr("line 2, column 1: rule 'a' is left-recursive"));
  EXPECT_THAT(Error("root ::= a\na ::= b \"x\" | \"y\"\nb ::= \"\" | a"),
              HasSubstr("left-recursive"));
  // Right recursion and nullable repetition in tail position are fine.
  EXPECT_TRUE(ParseGbnf("root ::= \"x\" root | \"\"").ok());
  EXPECT_TRUE(ParseGbnf("root ::= (\"a\"?)*").ok());
  EXPECT_TRUE(ParseGbnf("root ::= \"\"").ok());
}

TEST(GbnfTest, BoundsHostileInput) {
  std::string deep = "root ::= ";
  for (int i = 0; i < 300; ++i) deep += "(";
  EXPECT_THAT(Error(deep), HasSubstr("nested deeper than 200"));
  EXPECT_THAT(Error("root ::= \"" + std::string(1 << 20, 'a') + "\""), HasSubstr("at most"));
  // Repetitions stay small: a counted rule, not copies.
  absl::StatusOr<GbnfGrammar> g = ParseGbnf("root ::= (((\"ab\"{1000}){1000}){1000})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_LT(g->rules.size(), 5u);
}

TEST(GbnfTest, LiteralHelper) {
  EXPECT_EQ(GbnfLiteral("a\"b\\c\nd é"), "\"a\\\"b\\\\c\\nd é\"");
  absl::StatusOr<GbnfGrammar> g = ParseGbnf("root ::= " + GbnfLiteral("\x01\x7f\"é"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->rules[0].alternatives[0].size(), 4u);
  EXPECT_TRUE(IsGbnfRuleName("a-b_9"));
  EXPECT_FALSE(IsGbnfRuleName("a b"));
  EXPECT_FALSE(IsGbnfRuleName(""));
}

}  // namespace
}  // namespace tandem
