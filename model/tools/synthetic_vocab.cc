#include "model/tools/synthetic_vocab.h"

#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/utf8.h"

namespace tandem {
namespace {

// Training text for the merges: ordinary English and chat phrasing, so common words of test
// prompts become single tokens and encoding exercises real merge chains.
constexpr const char* kCorpus =
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox "
    "runs into the forest. There is a house at the end of the road; the people who live there "
    "are kind and they like to read in the evening. What is the capital of France? The capital "
    "of France is Paris. Hello! How are you today? I am fine, thank you. Please tell me a "
    "story about the sea and the wind. Once upon a time there was a ship on the sea, and the "
    "wind was strong. You are a helpful assistant. The user asks a question and the assistant "
    "answers it with care. This is a test of the tokenizer and the model, and it should be "
    "the same every time the test is run. Write the answer in one sentence, then stop. ";

// One pre-tokenised word as its current token texts, with how often it occurs.
struct Word {
  std::vector<std::string> parts;
  int count;
};

std::vector<std::pair<std::string, std::string>> TrainMerges(int max_merges) {
  std::map<std::string, int> counts;  // ordered: deterministic word order
  for (const absl::string_view piece : PreTokenize(PreTokenizerKind::kDigitsGpt2, kCorpus)) {
    ++counts[std::string(piece)];
  }
  std::vector<Word> words;
  for (const auto& [piece, count] : counts) {
    Word w{{}, count};
    for (const char c : piece) {
      std::string symbol;
      AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &symbol);
      w.parts.push_back(std::move(symbol));
    }
    words.push_back(std::move(w));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (static_cast<int>(merges.size()) < max_merges) {
    std::map<std::pair<std::string, std::string>, int> pairs;  // ordered: ties break by text
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.parts.size(); ++i)
        pairs[{w.parts[i], w.parts[i + 1]}] += w.count;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 1;  // a pair seen once teaches nothing
    for (const auto& [pair, count] : pairs) {
      if (count > best_count) {
        best = &pair;
        best_count = count;
      }
    }
    if (best == nullptr) break;
    const std::pair<std::string, std::string> merge = *best;
    for (Word& w : words) {
      std::vector<std::string> next;
      for (size_t i = 0; i < w.parts.size(); ++i) {
        if (i + 1 < w.parts.size() && w.parts[i] == merge.first && w.parts[i + 1] == merge.second) {
          next.push_back(merge.first + merge.second);
          ++i;
        } else {
          next.push_back(w.parts[i]);
        }
      }
      w.parts = std::move(next);
    }
    merges.push_back(merge);
  }
  return merges;
}

}  // namespace

absl::StatusOr<SyntheticVocab> BuildSyntheticVocab(int vocab_size) {
  if (vocab_size < kSyntheticMinVocab) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary size ", vocab_size,
                                                   " is below the minimum ", kSyntheticMinVocab,
                                                   " (3 special tokens + 256 bytes)"));
  }
  SyntheticVocab v;
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.emplace_back(special);
    v.kinds.push_back(TokenKind::kControl);
  }
  for (int b = 0; b < 256; ++b) {
    v.tokens.emplace_back();
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &v.tokens.back());
    v.kinds.push_back(TokenKind::kNormal);
  }
  v.merges = TrainMerges(vocab_size - kSyntheticMinVocab);
  absl::flat_hash_set<std::string> known(v.tokens.begin(), v.tokens.end());
  for (const auto& [left, right] : v.merges) {
    // Two merge paths can spell the same text ("a"+"bc", "ab"+"c"): one token serves both.
    if (!known.insert(left + right).second) continue;
    v.tokens.push_back(left + right);
    v.kinds.push_back(TokenKind::kNormal);
  }
  // Past what the corpus teaches: letter pairs ("ab", then " ab"), which no merge produces but
  // which decode to readable text when a random model samples them; then reserved controls.
  for (const absl::string_view prefix : {"", "Ġ"}) {
    for (char a = 'a'; a <= 'z'; ++a) {
      for (char b = 'a'; b <= 'z'; ++b) {
        if (static_cast<int>(v.tokens.size()) >= vocab_size) break;
        std::string text = absl::StrCat(prefix, std::string{a, b});
        if (!known.insert(text).second) continue;
        v.tokens.push_back(std::move(text));
        v.kinds.push_back(TokenKind::kNormal);
      }
    }
  }
  for (int i = 0; static_cast<int>(v.tokens.size()) < vocab_size; ++i) {
    v.tokens.push_back(absl::StrCat("<|reserved_", i, "|>"));
    v.kinds.push_back(TokenKind::kControl);
  }
  return v;
}

}  // namespace tandem
