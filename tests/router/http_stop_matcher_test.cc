#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "router/http/stop_matcher.h"

namespace tandem {
namespace {

// Feeds `pieces` one by one; returns everything emitted (plus the flush when no stop matched).
std::string Feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += m.Push(p);
  if (!m.stopped()) out += m.Flush();
  return out;
}

TEST(StopMatcherTest, NoStopsPassesEverythingThroughAtOnce) {
  StopMatcher m({});
  EXPECT_EQ(m.Push("Hello"), "Hello");
  EXPECT_EQ(m.Push(" world"), " world");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, MatchInsideOnePieceCutsBeforeIt) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.Push("abcENDdef"), "abc");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("more"), "");
}

TEST(StopMatcherTest, MatchAcrossTokenBoundariesIsNeverEmitted) {
  StopMatcher m({"\n\nUser:"});
  EXPECT_EQ(m.Push("Paris is the capital."), "Paris is the capital.");
  EXPECT_EQ(m.Push("\n"), "");  // could start the stop string: held back
  EXPECT_EQ(m.Push("\nUs"), "");
  EXPECT_EQ(m.Push("er:"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, HeldTextIsReleasedWhenItStopsLookingLikeAStop) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.Push("ab ST"), "ab ");
  EXPECT_EQ(m.Push("OX"), "STOX");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, FlushReturnsHeldTailWhenGenerationEnds) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.Push("the end S"), "the end ");
  EXPECT_EQ(m.Flush(), "S");
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(Feed(m, {"hel", "lo", " wor", "ld"}), "hel");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  StopMatcher m({"", "x"});
  EXPECT_EQ(Feed(m, {"abc"}), "abc");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, OverlappingPrefixStillFindsTheMatch) {
  // "aab" after "aa": the hold-back must keep enough to see the later match.
  StopMatcher m({"aab"});
  EXPECT_EQ(Feed(m, {"xa", "a", "a", "b", "tail"}), "xa");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, MultiByteCharactersStayWhole) {
  StopMatcher m({"é!"});
  EXPECT_EQ(m.Push("café"), "caf");  // "é" may begin the stop string
  EXPECT_EQ(m.Push(" ok"), "é ok");
}

TEST(StopMatcherTest, IncludeStopEmitsTheMatchedString) {
  StopMatcher m({"lo", "low"}, /*include_stop=*/true);
  EXPECT_EQ(m.Push("hel"), "he");
  // "lo" and "low" both match at the same place once "low" is complete: the longer one ends it.
  EXPECT_EQ(m.Push("low and more"), "llow");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("x"), "");
  StopMatcher split({"END"}, /*include_stop=*/true);
  EXPECT_EQ(split.Push("text E"), "text ");
  EXPECT_EQ(split.Push("ND tail"), "END");
}

TEST(StopMatcherTest, TextBeforeMinTokensIsNeverMatched) {
  // vLLM: stop strings are searched only once min_tokens tokens were generated; a stop string
  // wholly inside the earlier text does not count.
  StopMatcher m({"ab"});
  EXPECT_EQ(m.Push("xab", /*match=*/false), "xab");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push("ab", /*match=*/false), "ab");
  EXPECT_EQ(m.Push("cd"), "cd");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push("zabq"), "z");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, MatchEndingAfterMinTokensMayBeginBefore) {
  // The held-back "a" was pushed before min_tokens; the match ends in a matched piece.
  StopMatcher m({"ab"});
  EXPECT_EQ(m.Push("xa", /*match=*/false), "x");
  EXPECT_EQ(m.Push("b tail"), "");
  EXPECT_TRUE(m.stopped());
  // Same text pushed unmatched throughout: no stop.
  StopMatcher never({"ab"});
  EXPECT_EQ(never.Push("xa", /*match=*/false), "x");
  EXPECT_EQ(never.Push("b tail", /*match=*/false), "ab tail");
  EXPECT_FALSE(never.stopped());
}

}  // namespace
}  // namespace tandem
