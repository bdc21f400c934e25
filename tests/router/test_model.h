// A tiny served model for router tests: a GGUF image (built in memory, never written to disk)
// holding only a byte-level BPE tokenizer and llama metadata.
//
// Vocabulary: 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|> (control; eos = 2, stop ids 2 and
// 0), 3..258 the bytes 0x00..0xFF, 259 "he" (merge of 'h' 'e'). general.name "tiny-test".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "router/served_model.h"

namespace tandem::testing_router {

inline constexpr int32_t kTestVocab = 260;
inline constexpr char kTestModelName[] = "tiny-test";

// The token of one byte.
constexpr int32_t ByteToken(char c) { return 3 + static_cast<uint8_t>(c); }

// `chat_template` (tokenizer.chat_template) is omitted when empty. `add_bos`: the model asks for
// BOS (id 1) in front of every text and chat prompt (tokenizer.ggml.add_bos_token).
std::unique_ptr<ServedModel> MakeTestModel(int64_t context_length,
                                           const std::string& chat_template = "",
                                           bool add_bos = false);

}  // namespace tandem::testing_router
