// Tokenizer from GGUF metadata (tokenizer.ggml.*): model "gpt2" (byte-level BPE) with tokens,
// token_type, merges ("left right"), bos/eos/padding_token_id, add_bos_token and pre (the
// pre-tokenizer; absent = "default"). Reads metadata only; no tensor data is touched.
//
// Errors: NotFound (missing key), InvalidArgument (malformed arrays/ids), Unimplemented (other
// tokenizer models such as SentencePiece "llama", or an unknown pre-tokenizer).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/format/gguf_file.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

[[nodiscard]] absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& file);

}  // namespace tandem
