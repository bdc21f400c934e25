// Fuzz target: hostile prompt text and token ids against real vocabularies (the synthetic
// byte-level BPE vocabulary with ChatML specials, and a SentencePiece vocabulary with byte
// fallback): Encode with and without special tokens,
// Decode and StreamingDecoder over arbitrary ids (out-of-range ones included), ChatML
// formatting. The input is split at its first NUL: text before, ids (little-endian int32) after.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/tokenizer/chat.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_model.h"
#include "tests/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const absl::string_view text = input.substr(0, nul);
  std::vector<int32_t> ids;
  if (nul != absl::string_view::npos) {
    const absl::string_view raw = input.substr(nul + 1);
    ids.resize(raw.size() / sizeof(int32_t));
    if (!ids.empty()) std::memcpy(ids.data(), raw.data(), ids.size() * sizeof(int32_t));
  }
  const Tokenizer& tokenizer = fuzz::FuzzServedModel().tokenizer();
  fuzz::ExerciseTokenizer(tokenizer, text, ids);
  fuzz::ExerciseTokenizer(fuzz::FuzzSpmTokenizer(), text, ids);
  const ChatMessage chat[] = {{"user", std::string(text)}, {"assistant", "ok"}};
  const std::string formatted = FormatChatMl(chat, true, DefaultSystemPrompt(text));
  TANDEM_FUZZ_CHECK(tokenizer.ValidateIds(tokenizer.Encode(formatted, true)).ok());
  return 0;
}
