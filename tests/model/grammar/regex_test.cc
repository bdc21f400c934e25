// Regex -> GBNF: the supported features (full match), refusals by name, and random walks whose
// outputs std::regex_match accepts.
#include "model/grammar/regex.h"

#include <random>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/matcher.h"
#include "tests/model/grammar/grammar_test_util.h"

namespace tandem {
namespace {

using grammar_testing::TestVocab;
using grammar_testing::Widen;
using ::testing::HasSubstr;

const Vocabulary& Vocab() {
  static const Vocabulary* v = new Vocabulary(TestVocab());
  return *v;
}

std::shared_ptr<const CompiledGrammar> CompileRegex(const std::string& re,
                                                    const RegexGbnfOptions& opt = {}) {
  absl::StatusOr<std::string> gbnf = RegexToGbnf(re, "root", opt);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status() << " for " << re;
  if (!gbnf.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = CompileGrammar(*gbnf, Vocab());
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << *gbnf;
  return g.ok() ? *g : nullptr;
}

bool Matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  if (g == nullptr) return false;
  GrammarMatcher m(g);
  return m.AcceptBytes(text).ok() && m.CanTerminate();
}

std::string Refusal(const std::string& re) {
  absl::StatusOr<std::string> g = RegexToGbnf(re);
  EXPECT_FALSE(g.ok()) << re;
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(RegexTest, Features) {
  struct Case {
    const char* re;
    std::vector<std::string> yes, no;
  };
  const Case cases[] = {
      {"abc", {"abc"}, {"ab", "abcd", ""}},
      {"a|bc|", {"a", "bc", ""}, {"b"}},
      {"[a-c]+x?", {"a", "cabx"}, {"x", "ad"}},
      {"[^a-c\\d]",
       {"x", "é", "日"},
       {"a", "5",
        "\n"
        "x"}},
      {"\\d{3}-\\w{2,}\\s?", {"123-ab", "123-a_9 "}, {"12-ab", "123-a"}},
      {"(?:ab){2}(c|d){0,2}", {"abab", "ababcd"}, {"ab", "ababccc"}},
      {"(?<year>\\d{4})(?P<m>-\\d\\d)?", {"2024", "2024-01"}, {"202"}},
      {"a.c", {"abc", "aéc"}, {"a\nc", "ac"}},
      {"\\.\\*\\x41\\u00e9\\u{1F600}\\n\\t", {".*Aé😀\n\t"}, {}},
      {"^a+$", {"aaa"}, {"", "ab"}},
      {"[\\]\\-^]+", {"]-^"}, {"a"}},
      {"x{2,}y*?z+?", {"xxz", "xxxxyyzz"}, {"xz"}},
      {"a{,3}", {"a{,3}"}, {"aaa"}},  // not a quantifier: literal text, as in ECMAScript
      {"[\\s\\S]", {" ", "x", "\n"}, {"xx"}},
  };
  for (const Case& c : cases) {
    auto g = CompileRegex(c.re);
    for (const std::string& s : c.yes) EXPECT_TRUE(Matches(g, s)) << c.re << " on " << s;
    for (const std::string& s : c.no) EXPECT_FALSE(Matches(g, s)) << c.re << " on " << s;
  }
}

TEST(RegexTest, SearchAndJsonStringContent) {
  RegexGbnfOptions opt;
  opt.search = true;
  opt.json_string_content = true;
  auto g = CompileRegex("a\"b\\\\", opt);
  EXPECT_TRUE(Matches(g, "xa\\\"b\\\\y"));  // the JSON text of  xa"b\y
  EXPECT_FALSE(Matches(g, "xa\"b\\\\y"));   // an unescaped quote
  auto anchored = CompileRegex("^ab$", opt);
  EXPECT_TRUE(Matches(anchored, "ab"));
  EXPECT_FALSE(Matches(anchored, "xab"));
  auto newline = CompileRegex("^a\\nb$", opt);
  EXPECT_TRUE(Matches(newline, "a\\nb"));
  EXPECT_FALSE(Matches(newline, "a\nb"));
}

TEST(RegexTest, RefusalsByName) {
  EXPECT_EQ(Refusal("a(?=b)"), "regex: lookahead is not supported at offset 1");
  EXPECT_EQ(Refusal("(?<!a)b"), "regex: lookbehind is not supported at offset 0");
  EXPECT_EQ(Refusal("(a)\\1"), "regex: backreferences are not supported at offset 3");
  EXPECT_EQ(Refusal("\\bword"), "regex: word boundaries (\\b) are not supported at offset 0");
  EXPECT_EQ(Refusal("a^b"), "regex: '^' is supported only at the start of the pattern at offset 1");
  EXPECT_EQ(Refusal("a$b"), "regex: '$' is supported only at the end of the pattern at offset 1");
  EXPECT_EQ(Refusal("(?i)a"),
            "regex: inline flags and other (?...) groups are not supported at offset 0");
  EXPECT_EQ(Refusal("\\p{L}"),
            "regex: Unicode property escapes (\\p{...}) are not supported at offset 0");
  EXPECT_EQ(Refusal("(?>a)"), "regex: atomic groups are not supported at offset 0");
  EXPECT_EQ(Refusal("*a"), "regex: nothing to repeat at offset 0");
  EXPECT_EQ(Refusal("(ab"), "regex: missing ')' at offset 0");
  EXPECT_EQ(Refusal("ab)"), "regex: unmatched ')' at offset 2");
  EXPECT_EQ(Refusal("[ab"), "regex: unterminated character class at offset 0");
  EXPECT_EQ(Refusal("a{2000}"), "regex: repetition count above 1000 at offset 1");
  EXPECT_EQ(Refusal("a{3,2}"), "regex: repetition {m,n} with n < m at offset 1");
  EXPECT_EQ(Refusal("[z-a]"), "regex: range out of order in character class at offset 4");
  EXPECT_EQ(Refusal("\\q"), "regex: unknown escape \\q at offset 0");
  EXPECT_THAT(Refusal("[[:alpha:]]"), HasSubstr("POSIX classes"));
  EXPECT_THAT(RegexToGbnf("a", "bad name").status().message(), HasSubstr("bad rule name"));
}

// Random regexes from the supported features; every finished walk must std::regex_match.
std::string RandomRegex(std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  std::string out;
  const int parts = 1 + pick(3);
  for (int p = 0; p < parts; ++p) {
    std::string atom;
    switch (pick(depth > 2 ? 6 : 8)) {
      case 0:
        atom = std::string(1, "abcxyz"[pick(6)]);
        break;
      case 1:
        atom = "[a-f]";
        break;
      case 2:
        atom = "[^a-y\"\\\\]";
        break;
      case 3:
        atom = "\\d";
        break;
      case 4:
        atom = "\\w";
        break;
      case 5:
        atom = "\\.";
        break;
      case 6:
        atom = "(" + RandomRegex(rng, depth + 1) + "|" + RandomRegex(rng, depth + 1) + ")";
        break;
      default:
        atom = "(?:" + RandomRegex(rng, depth + 1) + ")";
        break;
    }
    switch (pick(6)) {
      case 0:
        atom += "?";
        break;
      case 1:
        atom += "*";
        break;
      case 2:
        atom += "+";
        break;
      case 3:
        atom += "{" + std::to_string(pick(3)) + "," + std::to_string(2 + pick(3)) + "}";
        break;
      default:
        break;
    }
    out += atom;
  }
  return out;
}

TEST(RegexTest, WalkedOutputsMatchStdRegex) {
  std::mt19937_64 rng(5);
  int checked = 0;
  for (int i = 0; i < 150; ++i) {
    const std::string re = RandomRegex(rng, 0);
    auto g = CompileRegex(re);
    ASSERT_NE(g, nullptr) << re;
    const std::wregex wre(Widen(re), std::regex::ECMAScript);
    for (int w = 0; w < 4; ++w) {
      grammar_testing::WalkOptions opt;
      opt.closer_bias = 0;
      grammar_testing::WalkResult r = RandomWalk(GrammarMatcher(g), Vocab(), rng, opt);
      if (!r.finished) continue;
      ++checked;
      EXPECT_TRUE(std::regex_match(Widen(r.text), wre)) << re << " on \"" << r.text << "\"";
    }
  }
  EXPECT_GT(checked, 400);
}

}  // namespace
}  // namespace tandem
