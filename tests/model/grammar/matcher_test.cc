// CompileGrammar + GrammarMatcher on a small byte vocabulary: acceptance, termination, and mask
// exactness (FillAllowedMask and IsAllowed equal a brute-force per-token check on many states).
#include "model/grammar/matcher.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/regex.h"
#include "tests/model/grammar/grammar_test_util.h"

namespace tandem {
namespace {

using grammar_testing::BruteAllowed;
using grammar_testing::RandomWalk;
using grammar_testing::TestVocab;
using grammar_testing::WalkOptions;
using ::testing::HasSubstr;

std::shared_ptr<const CompiledGrammar> Compile(const std::string& gbnf, const Vocabulary& v) {
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = CompileGrammar(gbnf, v);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << gbnf;
  return g.ok() ? *g : nullptr;
}

int32_t Id(const Vocabulary& v, std::string_view bytes) {
  for (int32_t t = 0; t < v.size(); ++t) {
    if (v.TokenBytes(t) == bytes && !v.IsNeverAllowed(t)) return t;
  }
  ADD_FAILURE() << "no token " << bytes;
  return -1;
}

// Mask == brute force, and IsAllowed agrees, at this state.
void ExpectExactMask(const GrammarMatcher& m, const Vocabulary& v, const std::string& where) {
  std::vector<uint64_t> mask;
  m.FillAllowedMask(&mask);
  ASSERT_EQ(mask.size(), (static_cast<size_t>(v.size()) + 63) / 64);
  for (int32_t t = 0; t < v.size(); ++t) {
    const bool bit = (mask[t >> 6] >> (t & 63)) & 1;
    const bool brute = BruteAllowed(m, t);
    ASSERT_EQ(bit, brute) << where << ": token " << t << " \"" << v.TokenBytes(t) << "\"";
    ASSERT_EQ(m.IsAllowed(t), brute) << where << ": IsAllowed(" << t << ")";
  }
  // Bits past the vocabulary stay clear.
  for (size_t t = v.size(); t < mask.size() * 64; ++t) ASSERT_FALSE((mask[t >> 6] >> (t & 63)) & 1);
}

TEST(MatcherTest, AcceptsExactlyTheLanguage) {
  const Vocabulary v = TestVocab();
  auto g = Compile("root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")?", v);
  GrammarMatcher m(g);
  EXPECT_FALSE(m.CanTerminate());
  EXPECT_TRUE(m.IsAllowed(Id(v, "ab")));
  EXPECT_TRUE(m.IsAllowed(Id(v, "a")));
  EXPECT_FALSE(m.IsAllowed(Id(v, "abc")));
  EXPECT_FALSE(m.IsAllowed(Id(v, "b")));
  ASSERT_TRUE(m.Accept(Id(v, "ab")).ok());
  EXPECT_FALSE(m.CanTerminate());
  absl::Status bad = m.Accept(Id(v, "x"));
  EXPECT_THAT(bad.message(), HasSubstr("is not allowed here"));
  ASSERT_TRUE(m.Accept(Id(v, "12")).ok());
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_FALSE(m.IsTerminated());
  ASSERT_TRUE(m.Accept(Id(v, "y")).ok());
  EXPECT_FALSE(m.CanTerminate());
  ASSERT_TRUE(m.Accept(Id(v, "z")).ok());
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_TRUE(m.IsTerminated());
  std::vector<uint64_t> mask;
  m.FillAllowedMask(&mask);
  for (uint64_t w : mask) EXPECT_EQ(w, 0u);
  EXPECT_EQ(m.tokens_accepted(), 4);
}

TEST(MatcherTest, SpecialEmptyAndOutOfRangeTokensAreNeverAllowed) {
  const Vocabulary v = TestVocab();
  auto g = Compile("root ::= .*", v);
  GrammarMatcher m(g);
  const int32_t special = v.size() - 1, empty = v.size() - 2;
  EXPECT_TRUE(v.IsNeverAllowed(special));
  EXPECT_TRUE(v.IsNeverAllowed(empty));
  EXPECT_FALSE(m.IsAllowed(special));
  EXPECT_FALSE(m.IsAllowed(empty));
  EXPECT_FALSE(m.IsAllowed(-1));
  EXPECT_FALSE(m.IsAllowed(v.size()));
  EXPECT_THAT(m.Accept(special).message(), HasSubstr("special"));
  EXPECT_THAT(m.Accept(v.size()).message(), HasSubstr("outside the vocabulary"));
  ExpectExactMask(m, v, "any text");
}

TEST(MatcherTest, Utf8CharactersSpanTokens) {
  const Vocabulary v = TestVocab();
  auto g = Compile("root ::= [é日😀]+ \"\\\"\"", v);
  GrammarMatcher m(g);
  ExpectExactMask(m, v, "start");
  ASSERT_TRUE(m.Accept(Id(v, "\xC3")).ok());  // the first byte of é
  EXPECT_FALSE(m.IsAllowed(Id(v, "\"")));
  ExpectExactMask(m, v, "inside é");
  ASSERT_TRUE(m.Accept(0xA9).ok());  // its second byte (single-byte token 0xA9)
  ASSERT_TRUE(m.Accept(Id(v, "\xF0\x9F")).ok());
  ExpectExactMask(m, v, "inside 😀");
  ASSERT_TRUE(m.Accept(Id(v, "\x98\x80\"")).ok());
  EXPECT_TRUE(m.IsTerminated());
}

TEST(MatcherTest, AcceptAllReplaysAndNamesTheFailingIndex) {
  const Vocabulary v = TestVocab();
  auto g = Compile("root ::= \"ab\" \"c\"*", v);
  GrammarMatcher m(g);
  const std::vector<int32_t> ok = {Id(v, "a"), Id(v, "b"), Id(v, "c")};
  ASSERT_TRUE(m.AcceptAll(ok).ok());
  EXPECT_TRUE(m.CanTerminate());
  GrammarMatcher m2(g);
  const std::vector<int32_t> bad = {Id(v, "ab"), Id(v, "c"), Id(v, "a")};
  absl::Status s = m2.AcceptAll(bad);
  EXPECT_THAT(s.message(), HasSubstr("replaying token 2 of 3"));
  EXPECT_EQ(m2.tokens_accepted(), 2);
}

TEST(MatcherTest, CopiesAreIndependentForks) {
  const Vocabulary v = TestVocab();
  auto g = Compile("root ::= (\"a\" | \"b\")+", v);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.Accept(Id(v, "a")).ok());
  GrammarMatcher fork = m;
  ASSERT_TRUE(fork.Accept(Id(v, "b")).ok());
  ASSERT_TRUE(m.Accept(Id(v, "a")).ok());
  EXPECT_EQ(m.tokens_accepted(), 2);
  EXPECT_EQ(fork.tokens_accepted(), 2);
  GrammarMatcher moved = std::move(fork);
  EXPECT_TRUE(moved.CanTerminate());
}

TEST(MatcherTest, AcceptBytes) {
  const Vocabulary v = TestVocab();
  auto g = Compile("root ::= \"{\\\"a\\\":\" [0-9]+ \"}\"", v);
  GrammarMatcher m(g);
  EXPECT_FALSE(m.AcceptBytes("{\"b").ok());
  ASSERT_TRUE(m.AcceptBytes("{\"a\":").ok());
  EXPECT_TRUE(m.IsAllowed(Id(v, "12")));
}

TEST(MatcherTest, EmptyGrammarIsTerminatedAtOnce) {
  const Vocabulary v = TestVocab();
  auto g = Compile("root ::= \"\"", v);
  GrammarMatcher m(g);
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_TRUE(m.IsTerminated());
}

TEST(MatcherTest, LongGenerationsStayBounded) {
  // Compaction keeps the stack pool small over a long output.
  const Vocabulary v = TestVocab();
  auto g = Compile("root ::= (\"[\" root \"]\" | \"ab\")*", v);
  GrammarMatcher m(g);
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(m.Accept(Id(v, i % 3 == 0 ? "[" : "ab")).ok());
  ExpectExactMask(m, v, "deep");
}

// Random walks over several grammars; at every state the mask is checked against brute force.
TEST(MatcherTest, MaskIsExactOnRandomStates) {
  const Vocabulary v = TestVocab();
  std::vector<std::string> grammars = {
      JsonObjectGbnf(),
      JsonValueGbnf(),
      *RegexToGbnf("[a-c]{2,5}(x|yz)*\\d{1,3}|é+[^a]?"),
      *RegexToGbnf("(ab|a)(bc|c)*\"?"),
      "root ::= (\"a\" | \"ab\" | \"abc\")* \"-\" [0-9]{0,3}",
      "root ::= x x? y\nx ::= \"a\"*\ny ::= \"a\" \"b\"?",  // ambiguous on purpose
      *JsonSchemaToGbnf(nlohmann::json::parse(R"({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 4},
                       "n": {"type": "integer", "minimum": -5, "maximum": 120},
                       "tags": {"type": "array", "items": {"enum": ["x", "y", 1, null]},
                                "maxItems": 3}},
        "required": ["n"], "additionalProperties": {"type": "boolean"}})")),
  };
  std::mt19937_64 rng(7);
  int states = 0;
  for (size_t gi = 0; gi < grammars.size(); ++gi) {
    auto g = Compile(grammars[gi], v);
    ASSERT_NE(g, nullptr);
    for (int walk = 0; walk < 12; ++walk) {
      GrammarMatcher m(g);
      std::uniform_real_distribution<double> u(0, 1);
      for (int step = 0; step < 25 && !m.IsTerminated(); ++step) {
        ExpectExactMask(m, v, "grammar " + std::to_string(gi) + " step " + std::to_string(step));
        if (::testing::Test::HasFatalFailure()) return;
        ++states;
        std::vector<uint64_t> mask;
        m.FillAllowedMask(&mask);
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < v.size(); ++t) {
          if ((mask[t >> 6] >> (t & 63)) & 1) allowed.push_back(t);
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(m.Accept(allowed[rng() % allowed.size()]).ok());
      }
    }
  }
  EXPECT_GT(states, 500);
}

TEST(MatcherTest, WalksEndWhereTheGrammarMayEnd) {
  const Vocabulary v = TestVocab();
  auto g = Compile(JsonValueGbnf(), v);
  std::mt19937_64 rng(11);
  int finished = 0;
  for (int i = 0; i < 200; ++i) {
    grammar_testing::WalkResult r = RandomWalk(GrammarMatcher(g), v, rng, WalkOptions{});
    if (!r.finished) continue;
    ++finished;
    nlohmann::json parsed = nlohmann::json::parse(r.text, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << r.text;
  }
  EXPECT_GT(finished, 150);
}

TEST(MatcherTest, CompileStats) {
  const Vocabulary v = TestVocab();
  auto g = Compile(JsonObjectGbnf(), v);
  EXPECT_GT(g->stats().positions, 10);
  EXPECT_GT(g->stats().rules, 3);
  EXPECT_GE(g->stats().compile_ms, 0);
  EXPECT_EQ(g->vocab_size(), v.size());
  GrammarMatcher m(g);
  EXPECT_EQ(m.vocab_size(), v.size());
}

}  // namespace
}  // namespace tandem
