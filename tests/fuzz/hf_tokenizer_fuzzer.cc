// Fuzz target: a Hugging Face tokenizer.json (TokenizerFromHfJson: model, vocab, merges in both
// spellings, added_tokens, normalizer, pre-tokenizer sequences), then encoding and decoding with
// whatever tokenizer came out. The same bytes also go through ParseHfLlamaConfig, the reader of
// a checkpoint's config.json (both are JSON a downloaded checkpoint supplies).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/format/hf_llama.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  if (absl::StatusOr<LlamaConfig> config = ParseHfLlamaConfig(json); !config.ok()) {
    TANDEM_FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument ||
                      config.status().code() == absl::StatusCode::kNotFound ||
                      config.status().code() == absl::StatusCode::kUnimplemented);
  }
  HfSpecialIds ids;
  ids.bos_id = 1;
  ids.eos_id = 2;
  ids.add_bos = true;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = TokenizerFromHfJson(json, ids);
  if (!tokenizer.ok()) {
    TANDEM_FUZZ_CHECK(tokenizer.status().code() == absl::StatusCode::kInvalidArgument ||
                      tokenizer.status().code() == absl::StatusCode::kUnimplemented);
    return 0;
  }
  const int32_t probe_ids[] = {
      -1, 0, 1, 2, (*tokenizer)->vocab_size() - 1, (*tokenizer)->vocab_size()};
  fuzz::ExerciseTokenizer(**tokenizer,
                          "Hello, world! <|im_start|>user\n2024 hé \xe4\xbd\xa0\xe5\xa5\xbd "
                          "\xf0\x9f\x98\x80<|im_end|>\n\xff",
                          probe_ids);
  return 0;
}
