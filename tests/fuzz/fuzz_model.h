// The model the request fuzzers validate against: a GGUF image holding only the synthetic
// byte-level BPE vocabulary (model/tools/synthetic_vocab.h: ChatML specials, 256 byte tokens,
// merges) and llama metadata, with a ChatML template that carries a default system message.
// Built in memory once per process; never written to disk.
#pragma once

#include <cstdint>
#include <string>

#include "router/served_model.h"

namespace tandem::fuzz {

inline constexpr int kFuzzVocab = 320;
inline constexpr int64_t kFuzzContext = 256;
inline constexpr char kFuzzModelName[] = "fuzz-model";

// The GGUF image (metadata only: tokenizer.ggml.*, llama.context_length, general.name).
std::string TokenizerGgufImage();

// The ServedModel of TokenizerGgufImage(); aborts if it cannot be built (a broken build, not a
// finding).
const ServedModel& FuzzServedModel();

// A SentencePiece vocabulary (tokenizer.ggml.model "llama") as a metadata-only GGUF image:
// <unk>, <s>, </s>, the user-defined <|user|>, 256 byte tokens, then scored "▁"-pieces; named
// "phi3" so Phi-3's rstrip rule applies too.
std::string SpmTokenizerGgufImage();

// The tokenizer of SpmTokenizerGgufImage(); aborts if it cannot be built.
const Tokenizer& FuzzSpmTokenizer();

}  // namespace tandem::fuzz
