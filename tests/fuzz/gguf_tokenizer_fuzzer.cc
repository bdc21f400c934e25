// Fuzz target: the tokenizer (and served-model limits) a GGUF file's metadata describes —
// TokenizerFromGguf and ServedModel::FromGguf, as the router and the nodes build them — then
// encoding and decoding with whatever tokenizer came out. Seeds are metadata-only GGUF images.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/gguf_file.h"
#include "model/tokenizer/gguf_tokenizer.h"
#include "router/served_model.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz.gguf");
  if (!file.ok()) return 0;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = TokenizerFromGguf(**file);
  if (!tokenizer.ok()) {
    const absl::StatusCode code = tokenizer.status().code();
    TANDEM_FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument ||
                      code == absl::StatusCode::kNotFound ||
                      code == absl::StatusCode::kUnimplemented);
    return 0;
  }
  const int32_t probe_ids[] = {-1,
                               0,
                               1,
                               2,
                               3,
                               255,
                               258,
                               259,
                               (*tokenizer)->vocab_size() - 1,
                               (*tokenizer)->vocab_size(),
                               INT32_MAX};
  fuzz::ExerciseTokenizer(**tokenizer,
                          "Hello, world! <|im_start|>user\nhé 12345 \xe4\xbd\xa0\xe5\xa5\xbd "
                          "\xf0\x9f\x98\x80<|im_end|>\n\xff\xfe",
                          probe_ids);
  absl::StatusOr<std::unique_ptr<ServedModel>> served = ServedModel::FromGguf(**file, "");
  if (served.ok()) {
    TANDEM_FUZZ_CHECK((*served)->limits().context_length > 0);
    TANDEM_FUZZ_CHECK((*served)->limits().vocab_size == (*served)->tokenizer().vocab_size());
  }
  return 0;
}
