#include "model/tokenizer/utf8.h"

#include <string>

#include "gtest/gtest.h"
#include "model/tokenizer/byte_level.h"

namespace tandem {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, ScansCompleteIncompleteAndInvalidSequences) {
  EXPECT_EQ(ScanUtf8("A").codepoint, U'A');
  const Utf8Step euro = ScanUtf8("\xE2\x82\xAC");
  EXPECT_EQ(euro.status, Utf8Status::kComplete);
  EXPECT_EQ(euro.length, 3);
  EXPECT_EQ(euro.codepoint, U'\u20AC');
  EXPECT_EQ(ScanUtf8("\xF0\x9F\x98\x80").codepoint, U'\U0001F600');
  EXPECT_EQ(ScanUtf8("\xF0\x9F\x98").status, Utf8Status::kIncomplete);
  EXPECT_EQ(ScanUtf8("\xE2").status, Utf8Status::kIncomplete);
  // Leads that can never start a sequence, overlongs, surrogates, past U+10FFFF.
  for (const char* bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xF5\x80\x80\x80", "\xFF"}) {
    EXPECT_EQ(ScanUtf8(bad).status, Utf8Status::kInvalid) << bad;
    EXPECT_EQ(ScanUtf8(bad).length, 1);
  }
  EXPECT_EQ(ScanUtf8("\xE0\x80\x80").length, 1);      // overlong 3-byte: E0 needs A0..BF
  EXPECT_EQ(ScanUtf8("\xED\xA0\x80").length, 1);      // surrogate: ED needs 80..9F
  EXPECT_EQ(ScanUtf8("\xF4\x90\x80\x80").length, 1);  // > U+10FFFF
  EXPECT_EQ(ScanUtf8("\xE2\x82\x41").status, Utf8Status::kInvalid);
  EXPECT_EQ(ScanUtf8("\xE2\x82\x41").length, 2);  // maximal subpart E2 82
}

// The worked example of Unicode §3.9 ("U+FFFD Substitution of Maximal Subparts").
TEST(Utf8Test, SanitizeReplacesMaximalSubparts) {
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(SanitizeUtf8(in),
            "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  EXPECT_EQ(SanitizeUtf8("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
  EXPECT_EQ(SanitizeUtf8("cut \xF0\x9F\x98"), "cut " + kFffd);
  EXPECT_TRUE(IsValidUtf8("héllo 日本 😀"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));
}

TEST(ByteLevelTest, Gpt2Mapping) {
  EXPECT_EQ(ByteToUnicode(' '), U'\u0120');   // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(ByteToUnicode('\t'), U'\u0109');  // ĉ
  EXPECT_EQ(ByteToUnicode('A'), U'A');
  EXPECT_EQ(ByteToUnicode(0xAD), U'\u0143');  // the last remapped byte
  EXPECT_EQ(ByteToUnicode(0xE9), U'\u00E9');
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(ByteLevelToBytes(BytesToByteLevel(all), &back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(BytesToByteLevel("é"), "Ã©");
  EXPECT_FALSE(ByteLevelToBytes("日", &back));  // U+65E5 is not in the mapping's image
}

}  // namespace
}  // namespace tandem
